package transfer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Transfer defaults.
const (
	// DefaultPerPeer is how many chunk requests one transfer keeps in
	// flight to one peer.
	DefaultPerPeer = 4
	// DefaultPerTransfer bounds one transfer's requests in flight overall.
	DefaultPerTransfer = 16
	// GrantTTL is how long a grant from an artifact's owner is valid.
	GrantTTL = time.Hour
	// MaxSources bounds the peers one transfer pulls from.
	MaxSources = 16
	// MaxServeStreams bounds the artifact streams one peer may have open
	// to us at once (a fetch opens PerPeer of them).
	MaxServeStreams = 2 * DefaultPerPeer
)

// Leases are the leases this node's jobs hold, as the store's access rule
// reads them.
type Leases interface {
	// MayFetch says whether peer from may fetch our private artifact id:
	// it holds a current lease naming it.
	MayFetch(id string, from peer.ID) bool
}

// Advertiser re-advertises what the node holds.
type Advertiser interface {
	Readvertise()
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	Store  *artifact.Store
	Net    *p2p.Node
	Signer *sign.Signer
	// Leases say whether a peer may fetch our private artifact by lease:
	// the lease part of the access rule (Store.MayRead). nil admits no one
	// by lease.
	Leases Leases
	// WarmMax is the largest artifact this node fetches at a peer's warm
	// request (see HandleWarm); 0 refuses every warm request.
	WarmMax int64
	// Context bounds background work (warm fetches); nil means none.
	Context context.Context
	// Advertiser, when set, is told after a fetch completes an artifact in
	// the store (the daemon re-advertises what it holds).
	Advertiser Advertiser
	// WarmBaseTimeout and WarmMinRate set a warm fetch's deadline (see
	// warmDeadline); zero: DefaultWarmBaseTimeout, DefaultWarmMinRate.
	WarmBaseTimeout time.Duration
	WarmMinRate     int64
	// PerPeer and PerTransfer limit requests in flight (defaults above).
	PerPeer, PerTransfer int
	Log                  *slog.Logger
}

// Service serves the store's artifacts over wire.ProtoArtifact and fetches
// artifacts from other peers into it.
type Service struct {
	cfg ServiceConfig
	log *slog.Logger

	mu       sync.Mutex
	serving  map[peer.ID]int // open streams per peer
	counters map[string]int
	// badPeers counts, per peer, the transfers it served a bad chunk in.
	badPeers map[peer.ID]int
	// warming is the warm fetches under way: artifact id to the peer that
	// asked for it.
	warming map[string]peer.ID
	// changed is notified at each count and each warm fetch's end.
	changed broadcast.Signal
}

// mayFetch is the lease part of the store's access rule (Leases).
func (s *Service) mayFetch(id string, from sign.ID) bool {
	return s.cfg.Leases != nil && s.cfg.Leases.MayFetch(id, peer.ID(from))
}

// NewService registers the artifact protocol handler on cfg.Net.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Store == nil || cfg.Net == nil || cfg.Signer == nil {
		return nil, errors.New("artifact: service needs a store, a network and a signer")
	}
	if cfg.PerPeer <= 0 {
		cfg.PerPeer = DefaultPerPeer
	}
	if cfg.PerTransfer <= 0 {
		cfg.PerTransfer = DefaultPerTransfer
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	s := &Service{cfg: cfg, log: cfg.Log, counters: map[string]int{}, badPeers: map[peer.ID]int{}, serving: map[peer.ID]int{},
		warming: map[string]peer.ID{}}
	cfg.Store.SetAccess(cfg.Signer.ID(), s.mayFetch)
	cfg.Net.Host.SetStreamHandler(wire.ProtoArtifact, cfg.Net.Guard(wire.ProtoArtifact, s.serve))
	cfg.Net.Handle(wire.ProtoWarm, s.HandleWarm)
	return s, nil
}

// Store is the service's store.
func (s *Service) Store() *artifact.Store { return s.cfg.Store }

func (s *Service) count(name string, n int) {
	s.mu.Lock()
	s.counters[name] += n
	s.mu.Unlock()
	s.changed.Notify()
}

// Changed returns a channel closed at the next change of the counters or
// the end of a warm fetch (its slot freed): take it before reading them,
// so that no change is missed.
func (s *Service) Changed() <-chan struct{} { return s.changed.Wait() }

// Counters returns the service's counters (artifact.*).
func (s *Service) Counters() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counters))
	for k, v := range s.counters {
		out[k] = v
	}
	return out
}

// BadPeers returns how many transfers each peer served a bad chunk in.
func (s *Service) BadPeers() map[peer.ID]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[peer.ID]int, len(s.badPeers))
	for k, v := range s.badPeers {
		out[k] = v
	}
	return out
}

// Announce publishes a DHT provider record for a complete artifact we
// hold, so fetchers find us.
func (s *Service) Announce(ctx context.Context, id string) error {
	if _, complete, err := s.cfg.Store.Manifest(id); err != nil || !complete {
		return fmt.Errorf("announce %s: not held complete", artifact.ShortID(id))
	}
	return s.cfg.Net.Provide(ctx, wire.ArtifactKey(id))
}

// Grant signs a grant for peer to fetch our artifact id from any holder.
func (s *Service) Grant(id string, to peer.ID) ([]byte, error) {
	env, err := sign.Seal(s.cfg.Signer, sign.DomainArtifactGrant, wire.ArtifactGrant{ID: id, Peer: to.String(), Expires: time.Now().Add(GrantTTL)})
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

// allowed decides whether from may fetch artifact id, given the grant it
// presented (Store.MayRead), and counts a refusal.
func (s *Service) allowed(id string, from peer.ID, grant []byte) error {
	err := s.cfg.Store.MayRead(id, artifact.Reader{Peer: sign.ID(from), Grant: grant})
	if err != nil && !errors.Is(err, artifact.ErrNotFound) {
		s.count("artifact.denied", 1)
	}
	return err
}

const (
	statusOK  = 0
	statusErr = 1
)

// serve answers a stream's requests until the peer closes it.
func (s *Service) serve(st network.Stream) {
	defer st.Close()
	from := st.Conn().RemotePeer()
	s.mu.Lock()
	busy := s.serving[from] >= MaxServeStreams
	if !busy {
		s.serving[from]++
	}
	s.mu.Unlock()
	if busy {
		s.count("artifact.streams_refused", 1)
		_ = st.Reset()
		return
	}
	defer func() {
		s.mu.Lock()
		if s.serving[from]--; s.serving[from] <= 0 {
			delete(s.serving, from)
		}
		s.mu.Unlock()
	}()
	br := bufio.NewReader(st)
	bw := bufio.NewWriterSize(st, 64<<10)
	authorised := map[string]bool{}
	for {
		_ = st.SetDeadline(time.Now().Add(time.Minute))
		b, release, err := p2p.ReadFrameOn(st, br, time.Minute)
		release()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = st.Reset()
			}
			return
		}
		resp, err := s.answer(from, b, authorised)
		if err != nil {
			_ = bw.WriteByte(statusErr)
			_ = frame.Write(bw, []byte(err.Error()))
		} else {
			_ = bw.WriteByte(statusOK)
			if err := frame.Write(bw, resp); err != nil {
				_ = st.Reset()
				return
			}
		}
		if err := bw.Flush(); err != nil {
			_ = st.Reset()
			return
		}
	}
}

func (s *Service) answer(from peer.ID, b []byte, authorised map[string]bool) ([]byte, error) {
	var req wire.ArtifactRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, fmt.Errorf("bad artifact request: %v", err)
	}
	if !artifact.ValidID(req.ID) {
		return nil, fmt.Errorf("bad artifact id %q", req.ID)
	}
	if !authorised[req.ID] {
		if err := s.allowed(req.ID, from, req.Grant); err != nil {
			return nil, err
		}
		authorised[req.ID] = true
	}
	switch req.Op {
	case wire.ArtifactOpManifest:
		m, complete, err := s.cfg.Store.Manifest(req.ID)
		if err != nil {
			return nil, err
		}
		if !complete {
			return nil, fmt.Errorf("artifact %s: %w (still being fetched here)", artifact.ShortID(req.ID), artifact.ErrNotFound)
		}
		meta, _, _ := s.cfg.Store.Meta(req.ID)
		s.cfg.Store.Pin(req.ID)() // served: recently used, last out
		mb, _ := json.Marshal(&m)
		out := wire.ArtifactManifest{Manifest: mb, Private: meta.Private, Owner: meta.Owner}
		if out.Owner == "" {
			out.Owner = s.cfg.Signer.ID().String()
			if meta.Private {
				g, err := s.Grant(req.ID, from)
				if err != nil {
					return nil, err
				}
				out.Grant = g
			}
		}
		return json.Marshal(out)
	case wire.ArtifactOpChunk:
		// The chunk must belong to the artifact the peer is admitted to.
		m, _, err := s.cfg.Store.Manifest(req.ID)
		if err != nil {
			return nil, err
		}
		if !hasChunk(&m, req.Chunk) {
			return nil, fmt.Errorf("chunk %s is not part of artifact %s", artifact.ShortID(req.Chunk), artifact.ShortID(req.ID))
		}
		data, err := s.cfg.Store.ReadChunk(req.Chunk)
		if err != nil {
			return nil, err
		}
		s.count("artifact.served_bytes", len(data))
		return data, nil
	}
	return nil, fmt.Errorf("unknown artifact op %q", req.Op)
}

func hasChunk(m *artifact.Manifest, h string) bool {
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			if c == h {
				return true
			}
		}
	}
	return false
}

// session is one open ProtoArtifact stream to a peer.
type session struct {
	st   network.Stream
	br   *bufio.Reader
	stop func() bool
}

// open starts a session with p; the stream is reset when ctx ends, so
// that a peer that stalls a call is given up with the fetch (a warm
// fetch's deadline, a job's cancel), not only at the call's timeout.
func (s *Service) open(ctx context.Context, p peer.ID) (*session, error) {
	st, err := s.cfg.Net.Host.NewStream(ctx, p, wire.ProtoArtifact)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })
	return &session{st: st, br: bufio.NewReaderSize(st, 64<<10), stop: stop}, nil
}

func (ss *session) call(req wire.ArtifactRequest, timeout time.Duration) ([]byte, error) {
	b, _ := json.Marshal(req)
	_ = ss.st.SetDeadline(time.Now().Add(timeout))
	if err := frame.Write(ss.st, b); err != nil {
		return nil, err
	}
	status, err := ss.br.ReadByte()
	if err != nil {
		return nil, err
	}
	resp, err := frame.Read(ss.br)
	if err != nil {
		return nil, err
	}
	if status != statusOK {
		return nil, &p2p.RemoteError{Msg: string(resp)}
	}
	return resp, nil
}

func (ss *session) close() {
	if ss.stop != nil {
		ss.stop()
	}
	_ = ss.st.Close()
}

// FetchOptions tune one fetch.
type FetchOptions struct {
	// Origin is a peer known to hold the artifact (the job's renter); it
	// is tried first for the manifest.
	Origin *peer.AddrInfo
	// Peers are further known holders.
	Peers []peer.AddrInfo
	// NoDiscovery skips the DHT provider search.
	NoDiscovery bool
	// Progress is called after each stored chunk with the bytes held and
	// the artifact's size.
	Progress func(done, total int64)
	// Grant is the owner's grant admitting us to a private artifact,
	// shown to every source (a source that is the owner issues one too).
	Grant []byte
	// Accept, when set, sees the verified manifest and the bytes still
	// missing before any chunk is fetched; an error ends the fetch.
	Accept func(m *artifact.Manifest, missing int64) error
	// For is who the artifact is fetched for (the job's renter, the warm
	// request's sender, the provider claiming a checkpoint, Local): the
	// store's copy counts only if For may read it (Store.MayRead), and a
	// chunk only if it is held for For (Store.Missing). The zero Reader
	// counts public artifacts only.
	For artifact.Reader
}

// Fetch makes artifact id complete in the store for opt.For, pulling the
// chunks not held for it in parallel from every holder it knows of or
// discovers, verifying each. The artifact is pinned while the fetch runs.
// Chunks stored before an interruption are kept, so fetching again
// resumes.
func (s *Service) Fetch(ctx context.Context, id string, opt FetchOptions) (artifact.FetchResult, error) {
	res := artifact.FetchResult{ID: id, FromPeer: map[string]int64{}}
	if !artifact.ValidID(id) {
		return res, fmt.Errorf("bad artifact id %q", id)
	}
	unpin := s.cfg.Store.Pin(id)
	defer unpin()
	if m, complete, err := s.cfg.Store.Manifest(id); err == nil && complete && s.cfg.Store.MayRead(id, opt.For) == nil {
		res.Size = m.Size
		return res, nil
	}
	self := s.cfg.Net.ID()
	var sources []peer.ID
	var discovered <-chan peer.AddrInfo
	seen := map[peer.ID]bool{self: true}
	addSource := func(ai peer.AddrInfo) {
		if seen[ai.ID] || len(sources) >= MaxSources {
			return
		}
		seen[ai.ID] = true
		if len(ai.Addrs) > 0 {
			s.cfg.Net.Host.Peerstore().AddAddrs(ai.ID, ai.Addrs, 10*time.Minute)
		}
		sources = append(sources, ai.ID)
	}
	if opt.Origin != nil {
		addSource(*opt.Origin)
	}
	for _, ai := range opt.Peers {
		addSource(ai)
	}
	if !opt.NoDiscovery {
		// The DHT search runs while the manifest comes from a named
		// source; its finds join the transfer's sources.
		found := make(chan peer.AddrInfo, MaxSources)
		fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		go func() {
			defer close(found)
			for ai := range s.cfg.Net.DHT.FindProvidersAsync(fctx, p2p.KeyCID(wire.ArtifactKey(id)), MaxSources) {
				found <- ai
			}
		}()
		defer func() {
			cancel()
			for range found {
			}
		}()
		if len(sources) == 0 {
			for ai := range found {
				addSource(ai)
			}
		} else {
			discovered = found
		}
	}
	if len(sources) == 0 {
		return res, fmt.Errorf("artifact %s: no peer holds it (none named, none found in the DHT)", artifact.ShortID(id))
	}

	// The manifest, from the first source that has it.
	var (
		m     artifact.Manifest
		mresp wire.ArtifactManifest
		errs  []error
		got   bool
	)
	for _, p := range sources {
		ss, err := s.open(ctx, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		b, err := ss.call(wire.ArtifactRequest{Op: wire.ArtifactOpManifest, ID: id, Grant: opt.Grant}, 30*time.Second)
		ss.close()
		if err == nil {
			err = json.Unmarshal(b, &mresp)
		}
		if err == nil {
			m, err = artifact.DecodeManifest(mresp.Manifest, id)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		got = true
		break
	}
	if !got {
		return res, fmt.Errorf("artifact %s: no source served its manifest: %w", artifact.ShortID(id), errors.Join(errs...))
	}
	res.Size = m.Size
	if err := s.cfg.Store.Fits(&m, id); err != nil {
		return res, err
	}
	if opt.Accept != nil {
		var n int64
		for _, c := range s.cfg.Store.Missing(&m, opt.For) {
			n += c.Size
		}
		if err := opt.Accept(&m, n); err != nil {
			return res, err
		}
	}
	owner := mresp.Owner
	if owner == self.String() {
		// Ours (e.g. a checkpoint a provider kept for us): served by our
		// own rules, like an artifact we added.
		owner = ""
	}
	meta := artifact.Meta{Private: mresp.Private, Owner: owner}
	if _, _, err := s.cfg.Store.Begin(m, meta); err != nil {
		return res, err
	}
	missing := s.cfg.Store.Missing(&m, opt.For)
	if discovered != nil && len(missing) > 0 {
		for ai := range discovered {
			addSource(ai)
		}
	}
	grant := mresp.Grant
	if len(grant) == 0 {
		grant = opt.Grant
	}
	if err := s.pull(ctx, id, m.Size, grant, sources, missing, opt.For, opt.Progress, &res); err != nil {
		return res, err
	}
	if err := s.cfg.Store.Complete(id, opt.For, meta); err != nil {
		return res, err
	}
	s.count("artifact.fetched", 1)
	if s.cfg.Advertiser != nil {
		s.cfg.Advertiser.Readvertise()
	}
	go func() {
		actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Announce(actx, id); err != nil {
			s.log.Debug("announce artifact", "id", artifact.ShortID(id), "err", err)
		}
	}()
	return res, nil
}

type pullJob struct {
	c      artifact.Chunk
	failed map[peer.ID]bool
}

// pull fetches the missing chunks from the sources.
func (s *Service) pull(ctx context.Context, id string, total int64, grant []byte, sources []peer.ID, missing []artifact.Chunk, rd artifact.Reader, progress func(int64, int64), res *artifact.FetchResult) error {
	if len(missing) == 0 {
		return nil
	}
	pctx := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan *pullJob, len(missing))
	for _, c := range missing {
		queue <- &pullJob{c: c, failed: map[peer.ID]bool{}}
	}
	var held int64 = total
	for _, c := range missing {
		held -= c.Size
	}
	var (
		mu        sync.Mutex
		remaining = len(missing)
		live      = len(sources)
		done      = make(chan struct{})
		fatal     error
		doneBytes = held
		dead      = map[peer.ID]bool{}
	)
	// exhausted: every source still serving refused chunk j (mu held).
	exhausted := func(j *pullJob) bool {
		n := 0
		for q := range j.failed {
			if !dead[q] {
				n++
			}
		}
		return n >= live
	}
	inflight := make(chan struct{}, s.cfg.PerTransfer)
	finish := func(err error) {
		// mu held
		if fatal == nil && err != nil {
			fatal = err
		}
		select {
		case <-done:
		default:
			close(done)
		}
	}
	var wg sync.WaitGroup
	for _, p := range sources {
		var peerDead atomic.Bool
		var peerWorkers sync.WaitGroup
		for w := 0; w < s.cfg.PerPeer; w++ {
			peerWorkers.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer peerWorkers.Done()
				var ss *session
				defer func() {
					if ss != nil {
						ss.close()
					}
				}()
				for !peerDead.Load() {
					var j *pullJob
					select {
					case <-ctx.Done():
						return
					case <-done:
						return
					case j = <-queue:
					}
					mu.Lock()
					tried := j.failed[p]
					if tried && exhausted(j) {
						finish(fmt.Errorf("artifact %s: chunk %s: every source left refused it", artifact.ShortID(id), artifact.ShortID(j.c.Hash)))
					}
					mu.Unlock()
					if tried {
						queue <- j
						select {
						case <-done:
							return
						case <-ctx.Done():
							return
						case <-time.After(10 * time.Millisecond):
						}
						continue
					}
					select {
					case inflight <- struct{}{}:
					case <-ctx.Done():
						queue <- j
						return
					}
					var data []byte
					var err error
					if ss == nil {
						ss, err = s.open(ctx, p)
					}
					if err == nil {
						data, err = ss.call(wire.ArtifactRequest{Op: wire.ArtifactOpChunk, ID: id, Chunk: j.c.Hash, Grant: grant}, time.Minute)
					}
					<-inflight
					var remote *p2p.RemoteError
					switch {
					case err != nil && errors.As(err, &remote):
						// The peer refuses or lacks this chunk: another serves it.
						mu.Lock()
						j.failed[p] = true
						if exhausted(j) {
							finish(fmt.Errorf("artifact %s: chunk %s: every source refused it: %v", artifact.ShortID(id), artifact.ShortID(j.c.Hash), remote))
						}
						mu.Unlock()
						queue <- j
						continue
					case err != nil:
						// The peer is gone (or the stream broke): drop it.
						queue <- j
						if ctx.Err() == nil {
							s.log.Debug("artifact source lost", "peer", p, "err", err)
						}
						peerDead.Store(true)
						return
					}
					if perr := s.cfg.Store.PutChunk(id, j.c.Hash, data, rd); perr != nil {
						queue <- j
						if errors.Is(perr, artifact.ErrFull) {
							mu.Lock()
							finish(perr)
							mu.Unlock()
							return
						}
						// A bad chunk: drop this peer for the transfer and count it.
						if !peerDead.Swap(true) {
							s.mu.Lock()
							s.badPeers[p]++
							s.counters["artifact.bad_chunk"]++
							s.mu.Unlock()
							s.changed.Notify()
							mu.Lock()
							res.BadPeers = append(res.BadPeers, p.String())
							mu.Unlock()
							s.log.Warn("artifact source served a bad chunk; dropped for this transfer", "peer", p, "chunk", artifact.ShortID(j.c.Hash))
						}
						return
					}
					mu.Lock()
					res.Fetched += int64(len(data))
					res.FromPeer[p.String()] += int64(len(data))
					doneBytes += int64(len(data))
					d := doneBytes
					remaining--
					if remaining == 0 {
						finish(nil)
					}
					mu.Unlock()
					s.count("artifact.fetched_bytes", len(data))
					if progress != nil {
						progress(d, total)
					}
				}
			}()
		}
		go func() {
			peerWorkers.Wait()
			mu.Lock()
			defer mu.Unlock()
			live--
			dead[p] = true
			if live == 0 && remaining > 0 {
				why := ""
				if len(res.BadPeers) > 0 {
					why = fmt.Sprintf(" (%d source(s) served a chunk that did not match its hash)", len(res.BadPeers))
				}
				finish(fmt.Errorf("artifact %s: every source failed or left with %d chunk(s) missing%s; fetch again to resume", artifact.ShortID(id), remaining, why))
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if remaining == 0 {
		return nil
	}
	if fatal != nil && pctx.Err() == nil {
		return fatal
	}
	if remaining > 0 {
		return fmt.Errorf("artifact %s: interrupted with %d chunk(s) missing (fetch again to resume): %w", artifact.ShortID(id), remaining, pctx.Err())
	}
	return nil
}
