// Command benchtargets reads `go test -bench` output on stdin and prints issue 25's targets as
// ratios to their floors (internal/benchtargets). `make bench` pipes its benchmarks into it.
package main

import (
	"fmt"
	"os"

	"github.com/quotaqual/quotaqual/internal/benchtargets"
)

func main() {
	res, err := benchtargets.Parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtargets:", err)
		os.Exit(1)
	}
	if err := benchtargets.Print(os.Stdout, benchtargets.Judge(res, benchtargets.Targets())); err != nil {
		fmt.Fprintln(os.Stderr, "benchtargets:", err)
		os.Exit(1)
	}
}
