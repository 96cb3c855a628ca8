// Package engines builds every topology engine in: importing it (for its side effects)
// registers each engine, every one of which lives in a package of its own, with package
// topology. The commands, qualify and the end-to-end tests import it; a new engine package is
// added here.
package engines

import (
	_ "github.com/quotaqual/quotaqual/topology/dockerengine"
	_ "github.com/quotaqual/quotaqual/topology/kindengine"
	_ "github.com/quotaqual/quotaqual/topology/netnsengine"
	_ "github.com/quotaqual/quotaqual/topology/processengine"
)
