// Package deploy holds what it takes to run gpumesh as a service: a systemd
// unit (gpumesh.service) and its install script (install.sh), a Dockerfile
// for the daemon, a Kubernetes DaemonSet for GPU nodes (daemonset.yaml) and
// a Grafana dashboard over the daemon's metrics (grafana-dashboard.json).
// Its tests validate each file and run the install script, `provider init`
// and the daemon in a fresh container that a renter then leases from.
package deploy
