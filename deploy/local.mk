# deploy/: set-up scripts and service files.
dist_noinst_SCRIPTS += deploy/install-deps.sh deploy/run.sh deploy/test.sh
