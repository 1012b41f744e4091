# kernels/: scalar reference kernels plus per-ISA variants. Each ISA variant is
# its own convenience library so only those files get ISA-specific flags.
QD_KERNEL_ARCHIVES =
