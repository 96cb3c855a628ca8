// Command peerbench prints quotaqual's admission beside the peer engines' (internal/peers/
// peerbench), for `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/quotaqual/quotaqual/internal/peers/peerbench"
)

func main() {
	var o peerbench.Options
	flag.IntVar(&o.Rounds, "rounds", 5, "alternating rounds")
	flag.IntVar(&o.PerRound1, "n1", 1000, "decisions per engine per round at 1 caller")
	flag.IntVar(&o.PerRound64, "n64", 8000, "decisions per engine per round at 64 callers")
	flag.Parse()
	o.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := peerbench.Run(ctx, o)
	if err == nil {
		err = peerbench.Print(os.Stdout, res)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}
