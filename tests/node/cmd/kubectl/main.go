// Command kubectl is the upstream Kubernetes CLI, built from the pinned k8s.io/kubernetes
// release for Bulwark's test node. It mirrors cmd/kubectl/kubectl.go.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // client auth plugins, as upstream
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// Upstream sets the log verbosity before the command is built, so that plugin handling
	// and .kuberc parsing log at the requested level.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
