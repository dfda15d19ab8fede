package attest

import "time"

// GPU is one device in a fingerprint. It mirrors auction.GPU field for field
// with the same JSON encoding (package auction imports attest, so attest
// cannot import auction); convert either way with a type conversion, e.g.
// attest.GPU(g) or auction.GPU(g).
type GPU struct {
	Model  string `json:"model"`
	VRAMGB int    `json:"vram_gb"`
	UUID   string `json:"uuid,omitempty"`
	// Detected is true when the device was read from the driver (NVML) and
	// false when it was declared in the provider's config.
	Detected bool `json:"detected"`
}

// Interval is a half-open span of absolute time [Start, End). It mirrors
// auction.Interval and converts to it the same way as GPU.
type Interval struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// LeaseTerms is what a party knows of a lease independently of the
// counterparty's receipt (fill it from auction.Lease).
type LeaseTerms struct {
	ID       string
	JobID    string
	Renter   string
	Provider string
	Price    float64
	Start    time.Time
	End      time.Time
	GPUCount int
}
