// Package docker holds gpumesh's multi-host test: real daemons, each in its
// own container on a private, internal Docker network, exercised only
// through the gpumesh CLI (docker exec). It covers DHT discovery, running a
// job end to end, node loss and a network partition.
//
// The image (gpumesh-node:test) is built locally by build-image.sh from the
// repository's own binary; no registry is used. The tests skip when the
// Docker CLI or daemon is unreachable. The package has no API: it exists
// for its tests.
package docker
