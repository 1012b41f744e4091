# deploy/: set-up scripts and service files.
dist_noinst_SCRIPTS += deploy/install-deps.sh deploy/run.sh deploy/test.sh

# The systemd units (qwen3d.service, and the template qwen3d@.service for
# one replica per NUMA node or CPU set) and example configurations. The
# units name the installed binary and config folder; override the unit
# folder with `make install systemdsystemunitdir=DIR`.
systemdsystemunitdir = $(prefix)/lib/systemd/system
qwen3dconfdir = $(sysconfdir)/qwen3d
QWEN3D_UNITS = qwen3d.service qwen3d@.service
QWEN3D_CONF_EXAMPLES = qwen3d.conf.example qwen3d-replica.conf.example
EXTRA_DIST += $(QWEN3D_UNITS:%=deploy/%) $(QWEN3D_CONF_EXAMPLES:%=deploy/%)
# The balancer in front of replicas (not installed: it goes into nginx's folders).
EXTRA_DIST += deploy/nginx/qwen3d.conf deploy/nginx/qwen3d-gate.conf
# Monitoring and Kubernetes (not installed: they go to Prometheus and the cluster).
EXTRA_DIST += deploy/prometheus/prometheus.yml deploy/prometheus/qwen3d-rules.yml \
	deploy/prometheus/qwen3d-alerts.yml deploy/prometheus/qwen3d-rules.test.yml \
	deploy/k8s/configmap.yaml deploy/k8s/deployment.yaml deploy/k8s/hpa.yaml deploy/k8s/model-volume.yaml \
	deploy/k8s/pdb.yaml deploy/k8s/prometheus-adapter.yaml deploy/k8s/service.yaml
install-data-local: install-qwen3d-service
uninstall-local: uninstall-qwen3d-service
install-qwen3d-service:
	$(MKDIR_P) "$(DESTDIR)$(systemdsystemunitdir)" "$(DESTDIR)$(qwen3dconfdir)"
	for u in $(QWEN3D_UNITS); do \
	  sed -e 's|/usr/local/bin/qwen3d|$(bindir)/qwen3d|g' -e 's|/usr/local/etc/qwen3d|$(qwen3dconfdir)|g' \
	    "$(srcdir)/deploy/$$u" >"$(DESTDIR)$(systemdsystemunitdir)/$$u" && \
	  chmod 644 "$(DESTDIR)$(systemdsystemunitdir)/$$u" || exit 1; \
	done
	for c in $(QWEN3D_CONF_EXAMPLES); do \
	  $(INSTALL_DATA) "$(srcdir)/deploy/$$c" "$(DESTDIR)$(qwen3dconfdir)/$$c" || exit 1; \
	done
uninstall-qwen3d-service:
	for u in $(QWEN3D_UNITS); do rm -f "$(DESTDIR)$(systemdsystemunitdir)/$$u"; done
	for c in $(QWEN3D_CONF_EXAMPLES); do rm -f "$(DESTDIR)$(qwen3dconfdir)/$$c"; done
.PHONY: install-qwen3d-service uninstall-qwen3d-service
