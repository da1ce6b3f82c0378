// Command harnessfacts is what users run. It serves `run` (and `version`)
// itself and hands every other command to harnessfacts-full, the binary
// beside it that holds them all (cmd/harnessfacts-full).
//
// Why two binaries: a local run is a short process, and one that links
// Kubernetes' clients (client-go's typed clientset and scheme,
// controller-runtime's manager, every API group of k8s.io/api) spends about
// 10 ms of each run mapping and initialising them before its first line
// runs (`version` takes 22 ms from harnessfacts-full, 12 from this binary,
// means of 20 here; a local run of the hello fixture is about 85 ms in all). `run` needs none of them: it validates
// the run as the API server would, with the API server's own libraries,
// and runs it with the node-agent's executor, neither of which talks to a
// cluster. TestLinksNoKubernetesClient keeps it so.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/harnessfacts/harnessfacts/internal/prestart"
	"github.com/harnessfacts/harnessfacts/internal/runcmd"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/internal/version"
)

func main() {
	args := os.Args[1:]
	if !servedHere(args) {
		os.Exit(handOver(args))
	}
	root := &cobra.Command{
		Use:           "harnessfacts",
		Short:         "Run coding agents against task fixtures in a sandbox and record hashed evidence",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(version.Command(), runcmd.Command())
	err := root.Execute()
	// No sandbox of the preflight `run`'s init began outlives the
	// process, whatever ended it (a flag refused before the run began).
	prestart.Wait()
	if err != nil {
		// An error may quote what a run or a folder handed over: shown
		// inert, as everything the commands print of them.
		fmt.Fprintln(os.Stderr, "harnessfacts:", termsafe.String(err.Error()))
		os.Exit(1)
	}
}

// servedHere says whether this binary runs the command args name; every
// other one (no command, help, completion, the cluster's commands) is
// harnessfacts-full's, whose help lists them all.
func servedHere(args []string) bool {
	return len(args) > 0 && (args[0] == "run" || args[0] == "version")
}
