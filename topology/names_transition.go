package topology

// The unexported names the netns and process files still use for helpers now exported for the
// engine packages. They stay only while another branch changes those files (the gateway
// launch): once both are merged, rename the uses and delete this file.
var (
	isGateway          = IsGateway
	siteOf             = SiteOf
	elapsedSince       = ElapsedSince
	newTransport       = NewTransport
	connectError       = ConnectError
	nftPartitionCmd    = NFTPartitionCommand
	storeSentinelAddrs = StoreSentinelAddrs
	readStoreEvents    = ReadStoreEvents
	storeGroupFacts    = StoreGroupFacts
	storeNodeState     = ReadStoreNodeState
	storePrimary       = StorePrimary
)

const probeTimeout = ProbeTimeout

func (s *Spec) progress(format string, args ...any) { s.Progress(format, args...) }
