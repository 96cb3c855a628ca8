//go:build quotaqual_testhooks

package gateway

import (
	"os"
	"slices"
	"strings"
)

// TestHooksEnv lists, comma-separated, the regressions a test build switches on.
const TestHooksEnv = "QUOTAQUAL_TEST_HOOKS"

var testHooks = strings.Split(os.Getenv(TestHooksEnv), ",")

func testHook(name string) bool { return slices.Contains(testHooks, name) }
