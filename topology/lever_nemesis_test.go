package topology

import (
	"errors"
	"strings"
	"testing"
)

// TestStoreErrorRedacts: a server error that echoes the command's arguments (as "unknown
// command" does) loses the password and the arguments, and keeps the verb.
func TestStoreErrorRedacts(t *testing.T) {
	const pw = "-QTscLJKJn04GfpVwbyptpJ4JjbBC-dN"
	err := StoreError(errors.New("ERR unknown command 'NOPE', with args beginning with: '"+pw+"' 'maxmemory'"), pw, []string{"NOPE", pw, "maxmemory"})
	if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "maxmemory") || !strings.Contains(err.Error(), "store command NOPE") {
		t.Errorf("StoreError: %v", err)
	}
}
