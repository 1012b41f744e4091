# deploy/: set-up scripts and service files.
dist_noinst_SCRIPTS += deploy/install-deps.sh deploy/run.sh deploy/test.sh

# The systemd unit and an example configuration. The unit names the
# installed binary and config folder; override the unit folder with
# `make install systemdsystemunitdir=DIR`.
systemdsystemunitdir = $(prefix)/lib/systemd/system
qwen3dconfdir = $(sysconfdir)/qwen3d
EXTRA_DIST += deploy/qwen3d.service deploy/qwen3d.conf.example
install-data-local: install-qwen3d-service
uninstall-local: uninstall-qwen3d-service
install-qwen3d-service:
	$(MKDIR_P) "$(DESTDIR)$(systemdsystemunitdir)" "$(DESTDIR)$(qwen3dconfdir)"
	sed -e 's|/usr/local/bin/qwen3d|$(bindir)/qwen3d|g' -e 's|/usr/local/etc/qwen3d|$(qwen3dconfdir)|g' \
		"$(srcdir)/deploy/qwen3d.service" >"$(DESTDIR)$(systemdsystemunitdir)/qwen3d.service"
	chmod 644 "$(DESTDIR)$(systemdsystemunitdir)/qwen3d.service"
	$(INSTALL_DATA) "$(srcdir)/deploy/qwen3d.conf.example" "$(DESTDIR)$(qwen3dconfdir)/qwen3d.conf.example"
uninstall-qwen3d-service:
	rm -f "$(DESTDIR)$(systemdsystemunitdir)/qwen3d.service" "$(DESTDIR)$(qwen3dconfdir)/qwen3d.conf.example"
.PHONY: install-qwen3d-service uninstall-qwen3d-service
