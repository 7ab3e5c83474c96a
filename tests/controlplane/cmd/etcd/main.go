// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3), built at the version
// kubeadm pairs with the pinned Kubernetes release. It mirrors etcd's own main.go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
