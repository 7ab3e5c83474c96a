// Command coredns is CoreDNS, built from its pinned release for Bulwark's test node with only
// the plugins the node's Corefile uses (upstream's core/plugin imports every plugin, including
// the cloud DNS providers and their SDKs). Plugins register themselves when imported; the
// order in which they run comes from core/dnsserver, not from this list.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
