// Command pause is the pod sandbox's placeholder process, built FROM scratch for
// the local kind node image: it holds the pod's namespaces and exits on SIGINT or
// SIGTERM, as the upstream pause container does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
