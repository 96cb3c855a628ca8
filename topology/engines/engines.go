// Package engines builds every topology engine in: importing it (for its side effects)
// registers the engines that live in packages of their own with package topology. The
// commands, qualify and the end-to-end tests import it; a new engine package is added here.
package engines

import (
	_ "github.com/quotaqual/quotaqual/topology/dockerengine"
	_ "github.com/quotaqual/quotaqual/topology/kindengine"
)
