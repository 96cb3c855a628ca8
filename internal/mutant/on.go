//go:build quotaqual_mutants

package mutant

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Built reports whether this binary carries the mutants (built with -tags quotaqual_mutants).
const Built = true

var (
	armOnce  sync.Once
	armErr   error
	active   Name
	identity string
)

// Arm reads QUOTAQUAL_MUTANT once, in the gateway process at start; identity names the
// process (its config file), which the gateway-clock mutant uses to give gateways different
// clocks. An unknown name is an error that lists the valid ones.
func Arm(id string) error {
	armOnce.Do(func() {
		identity = id
		active, armErr = parse(os.Getenv(EnvVar))
		for _, check := range checks {
			if armErr == nil && active != "" {
				armErr = check(active)
			}
		}
		if active != "" {
			// A JSON line like the gateway's own log, so the evidence shows what ran.
			fmt.Fprintf(os.Stderr, "{\"level\":\"WARN\",\"msg\":\"mutant armed: this gateway is deliberately broken\",\"mutant\":%q}\n", string(active))
		}
	})
	return armErr
}

var checks []func(Name) error

// RegisterCheck adds a check Arm runs on the armed mutant (at package init): a mutant whose
// broken code no longer applies to the code it breaks must stop the gateway at start, not
// qualify the unbroken code under its name.
func RegisterCheck(f func(Name) error) { checks = append(checks, f) }

// Is reports whether the armed mutant is n.
func Is(n Name) bool { return active != "" && active == n }

// Active is the armed mutant ("" when none).
func Active() Name { return active }

// Identity is what Arm was given (the gateway's config path).
func Identity() string { return identity }

// IsGatewayB reports whether this process is gateway-b (its config file is gateway-b.yaml, as
// every topology engine names it).
func IsGatewayB() bool {
	return strings.HasPrefix(filepath.Base(identity), "gateway-b")
}
