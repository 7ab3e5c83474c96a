// Command pause is the sandbox ("pause") process of the test node's pods: it holds the pod's
// namespaces open and sleeps until it is asked to stop. It is static (CGO_ENABLED=0) so that the
// image can be built from scratch. As PID 1 of a pod that shares its PID namespace it also reaps
// orphaned children, like the upstream pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
