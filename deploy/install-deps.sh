#!/usr/bin/env bash
# Installs the Debian packages qwen3d builds, tests and runs with. Idempotent:
# apt-get runs only when a package is missing. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential autoconf automake pkg-config
  libmicrohttpd-dev libjansson-dev libuv1-dev libprotobuf-c-dev protobuf-c-compiler
  libhwloc-dev check libpcre2-dev libutf8proc-dev
  nodejs npm
)
if [ "${1:-}" = "--test" ]; then
  # `make fuzz-smoke`: clang with its sanitizer and libFuzzer runtimes
  # (libclang-rt-14-dev is only recommended by clang), and llvm for
  # llvm-symbolizer, so a finding's stack trace names functions and lines.
  packages+=(clang libclang-rt-14-dev llvm prometheus curl)
  # test_kernels runs the avx512 kernels over SIMDe's portable AVX-512 where the CPU lacks it.
  packages+=(libsimde-dev)
  # tests/serve_webui.sh drives the web UI in headless Chromium (puppeteer-core from npm).
  packages+=(chromium)
  # The deploy tests: systemd-analyze (verify, security) for the units,
  # hwloc-bind to show a replica's binding, and a real nginx in front of
  # replicas (nginx-light has the upstream, hash and map modules they use).
  packages+=(systemd hwloc nginx-light)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A machine may carry node/npm outside Debian's packages, or another of
# Debian's nginx flavours (they conflict with each other); those are fine too.
have_node=0 have_nginx=0
command -v node >/dev/null && command -v npm >/dev/null && have_node=1
command -v nginx >/dev/null && have_nginx=1
filtered=()
for p in "${missing[@]}"; do
  case "$p" in
    nodejs|npm) [ $have_node = 1 ] || filtered+=("$p") ;;
    nginx-light) [ $have_nginx = 1 ] || filtered+=("$p") ;;
    *) filtered+=("$p") ;;
  esac
done
missing=("${filtered[@]}")
[ "${#missing[@]}" -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
