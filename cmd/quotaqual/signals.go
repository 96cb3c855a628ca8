package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// survivePipeLoss keeps the process alive when its standard output or error goes away (`up |
// tee up.log` and Ctrl-C kills tee first; a closed terminal): by default Go exits on SIGPIPE
// from a write to fd 1 or 2, which would cut a teardown short and leave a run's files behind.
// With SIGPIPE caught, such a write fails with EPIPE instead, and every write to stdout or
// stderr here ignores its error. The handler is not inherited by the processes a run starts.
func survivePipeLoss() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// reportRemoved says what a sweep of a dead run's files removed, and what it could not.
func reportRemoved(w io.Writer, removed, errs []string) {
	for _, r := range removed {
		fmt.Fprintln(w, "removed", r)
	}
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
}
