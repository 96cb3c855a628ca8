package undertest

import (
	"embed"
	"fmt"
	"path"
	"strings"
)

// The shipped profiles: quotaqual (the default), quotaqual-memory (known bad), altgateway
// (the independent gateway of the tests), and documented, unverified templates for foreign
// gateways.
//
//go:embed profiles/*.yaml
var shippedFS embed.FS

// DefaultName is the profile `quotaqual run` qualifies when no --gateway is given.
const DefaultName = "quotaqual"

// Default is quotaqual's own gateway.
func Default() *Profile {
	p, err := Shipped(DefaultName)
	if err != nil {
		panic(err) // the embedded default is validated by the tests
	}
	return p
}

// Shipped returns the shipped profile name (the file profiles/<name>.yaml).
func Shipped(name string) (*Profile, error) {
	b, err := shippedFS.ReadFile(path.Join("profiles", name+".yaml"))
	if err != nil {
		return nil, fmt.Errorf("no shipped gateway profile %q: choose one of %s", name, strings.Join(ShippedNames(), ", "))
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("shipped gateway profile %s:\n%w", name, err)
	}
	return p, nil
}

// ShippedNames lists the shipped profiles.
func ShippedNames() []string {
	ents, _ := shippedFS.ReadDir("profiles")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return out
}

// ShippedYAML is the text of a shipped profile, for `quotaqual run --gateway` users to copy.
func ShippedYAML(name string) ([]byte, error) {
	return shippedFS.ReadFile(path.Join("profiles", name+".yaml"))
}
