package providerstub

import (
	"strings"
	"testing"
	"time"
)

func TestProviderFlagsValidate(t *testing.T) {
	ok := ProviderFlags{Site: "west", Listen: "127.0.0.1:8000", AdminListen: "127.0.0.1:9000", Model: DefaultModel, CompletionTokens: 8}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mut  func(*ProviderFlags)
		flag string
	}{
		{"missing site", func(f *ProviderFlags) { f.Site = "" }, "--site"},
		{"site with underscore", func(f *ProviderFlags) { f.Site = "bad_name" }, "--site"},
		{"site too long", func(f *ProviderFlags) { f.Site = strings.Repeat("a", 33) }, "--site"},
		{"listen without port", func(f *ProviderFlags) { f.Listen = "localhost" }, "--listen"},
		{"listen with bad port", func(f *ProviderFlags) { f.Listen = "localhost:http" }, "--listen"},
		{"admin missing", func(f *ProviderFlags) { f.AdminListen = "" }, "--admin-listen"},
		{"same ports", func(f *ProviderFlags) { f.AdminListen = f.Listen }, "--admin-listen"},
		{"zero tokens", func(f *ProviderFlags) { f.CompletionTokens = 0 }, "--completion-tokens"},
		{"negative ttft", func(f *ProviderFlags) { f.TTFT = -time.Second }, "--ttft"},
		{"negative inter-token", func(f *ProviderFlags) { f.InterToken = -time.Second }, "--inter-token"},
	} {
		t.Run(tc.name+" names "+tc.flag, func(t *testing.T) {
			f := ok
			tc.mut(&f)
			err := f.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Fatalf("err = %v, want one naming %s", err, tc.flag)
			}
		})
	}
}
