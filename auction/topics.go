package auction

import (
	"context"
	"sort"
	"strings"

	"github.com/gpumesh/gpumesh/auction/gpumodel"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TopicPrefix is the gossip namespace of calls for bids (protocol version
// 2: gossip unsigned at the GossipSub layer, see p2p.GossipOptions).
const TopicPrefix = "gpumesh/jobs/2/"

// Transport carries the market's messages. The daemon implements it over
// libp2p; auctiontest.MemNetwork implements it in memory for tests.
type Transport interface {
	// Publish gossips a call for bids on a topic.
	Publish(ctx context.Context, topic string, data []byte) error
	// SendCall delivers a sampled call directly to one provider it asks
	// (every asked provider is one the renter knows); the provider takes
	// it as it takes a gossiped one, and answers with its bid or decline
	// (a terms.BidMessage, as SendBid would carry it) or nothing.
	SendCall(ctx context.Context, to peer.ID, data []byte) ([]byte, error)
	// SendBid delivers a bid (or a decline, a capacity notice) directly
	// to a renter. It names no addresses: a call's Job.OwnerAddrs are
	// anyone's to fill, so the transport reaches the renter only through
	// what it learned itself (a connection, the renter's own identify
	// addresses, the DHT).
	SendBid(ctx context.Context, to peer.ID, data []byte) error
	// SendAward delivers an award to a provider and returns its signed
	// confirm (or a bid release, answered by nothing).
	SendAward(ctx context.Context, to peer.ID, data []byte) ([]byte, error)
}

// topicPart normalizes a topic component: lower case, no separators.
func topicPart(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "any"
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == '\t' {
			return '_'
		}
		return r
	}, s)
}

// modelPart is a GPU model's topic component: its catalogue family, so that
// "RTX 4090", "RTX4090" and "NVIDIA GeForce RTX 4090" share one topic and a
// job for "H100" reaches SXM, PCIe and NVL providers alike.
func modelPart(m string) string { return topicPart(gpumodel.FamilyOf(m)) }

// continent is a region's first dash-separated segment ("eu-west" → "eu").
func continent(region string) string {
	region = strings.TrimSpace(region)
	if i := strings.IndexByte(region, '-'); i >= 0 {
		region = region[:i]
	}
	return topicPart(region)
}

// JobTopics are the topics a job's call is published on:
// TopicPrefix + "<continent or any>/<model or any>", one per GPU model the
// job accepts. The continent is the first segment of the job's region.
func JobTopics(j *terms.Job) []string {
	cont := continent(j.Region)
	if len(j.GPUModels) == 0 {
		return []string{TopicPrefix + cont + "/any"}
	}
	set := map[string]bool{}
	for _, m := range j.GPUModels {
		set[TopicPrefix+cont+"/"+modelPart(m)] = true
	}
	return sortedKeys(set)
}

// ProviderTopics are the topics a provider must subscribe to in order to
// hear every call it could be eligible for: its continent and "any", each
// crossed with each of its GPU models and "any".
func ProviderTopics(c *terms.Capability) []string {
	set := map[string]bool{}
	for _, cont := range []string{continent(c.Region), "any"} {
		set[TopicPrefix+cont+"/any"] = true
		for _, g := range c.GPUs {
			set[TopicPrefix+cont+"/"+modelPart(g.Model)] = true
		}
	}
	return sortedKeys(set)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
