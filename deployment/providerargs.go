package deployment

import "github.com/quotaqual/quotaqual/providerstub"

// ProviderArgs returns the arguments that start the provider of site with the profile's
// completion tokens and delays: exec the quotaqual binary with them.
func (d *Deployment) ProviderArgs(site, dataListen, adminListen string) []string {
	f := providerstub.ProviderFlags{
		Site:             site,
		Listen:           dataListen,
		AdminListen:      adminListen,
		Model:            providerstub.DefaultModel,
		CompletionTokens: d.Profile.CompletionTokens,
		TTFT:             d.Profile.TTFT,
		InterToken:       d.Profile.InterToken,
	}
	return f.Args()
}
