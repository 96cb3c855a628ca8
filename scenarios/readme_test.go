package scenarios

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEStatesEveryBlackBoxPath checks the README's table of black-box paths holds every
// scenario's BlackBox statement as the definition has it, so the docs say what the code does.
func TestREADMEStatesEveryBlackBoxPath(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range All() {
		row := "| `" + s.Name + "` | " + s.BlackBox + " |"
		if !strings.Contains(string(b), row) {
			t.Errorf("README.md lacks the row\n%s", row)
		}
	}
}
