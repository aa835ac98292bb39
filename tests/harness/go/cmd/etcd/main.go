// Command etcd is the etcd server built from go.etcd.io/etcd/server/v3 at the
// version pinned in go.mod. Debian's etcd 3.4 lacks the RequestWatchProgress
// storage feature that kwok needs, so the harness builds its own.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
