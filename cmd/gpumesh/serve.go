package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
	"github.com/urfave/cli/v2"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "always-on services on rented GPUs, behind a local HTTP gateway",
		Subcommands: []*cli.Command{
			{
				Name:      "post",
				Usage:     "start a service: each replica is a lease (with --nodes K, a gang of K leases); prints the gateway's loopback address",
				ArgsUsage: "SERVICE.yaml | -- CMD [ARGS...]",
				Flags:     servePostFlags(),
				Action:    servePostAction,
			},
			{
				Name:   "list",
				Usage:  "list this node's services",
				Flags:  []cli.Flag{jsonFlag()},
				Action: serveListAction,
			},
			{
				Name:      "status",
				Usage:     "show one service: gateway, replicas, per-replica rate, latency and errors, events",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{noTruncFlag(), jsonFlag()},
				Action:    serveStatusAction,
			},
			{
				Name:      "scale",
				Usage:     "change a service's replica bounds",
				ArgsUsage: "ID",
				Flags: []cli.Flag{
					&cli.IntFlag{Name: "replicas", Usage: "minimum replicas"},
					&cli.IntFlag{Name: "max-replicas", Usage: "maximum replicas (the autoscaler's ceiling)"},
					jsonFlag(),
				},
				Action: serveScaleAction,
			},
			{
				Name:  "token",
				Usage: "API tokens of a service's public endpoint (--public), for its end users",
				Subcommands: []*cli.Command{
					{
						Name:      "add",
						Usage:     "make an API token; it is printed once (only its hash is kept)",
						ArgsUsage: "ID NAME",
						Flags:     []cli.Flag{jsonFlag()},
						Action:    serveTokenAddAction,
					},
					{
						Name:      "list",
						Usage:     "list a service's API tokens: name, made, requests, rate-limited requests",
						ArgsUsage: "ID",
						Flags:     []cli.Flag{jsonFlag()},
						Action:    serveTokenListAction,
					},
					{
						Name:      "revoke",
						Usage:     "revoke an API token: it is refused from the next request on",
						ArgsUsage: "ID NAME",
						Flags:     []cli.Flag{jsonFlag()},
						Action:    serveTokenRevokeAction,
					},
				},
			},
			{
				Name:      "stop",
				Usage:     "stop a service: its gateway closes and its leases are cancelled",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{jsonFlag()},
				Action:    serveStopAction,
			},
		},
	}
}

func servePostFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "file", Usage: "service file: a task file with a service: section (readiness_probe, replicas... see examples/vllm-service.yaml) or a YAML service spec (fields as in api.ServiceSpec, the replica job under job:); flags given explicitly override it. Also given as the argument: serve post service.yaml"},
		&cli.StringFlag{Name: "id", Usage: "service id (default: generated)"},
		&cli.IntFlag{Name: "port", Usage: "the port the server listens on, inside its sandbox (also in $PORT)"},
		&cli.IntFlag{Name: "replicas", Value: 1, Usage: "minimum (and initial) number of replicas"},
		&cli.IntFlag{Name: "max-replicas", DefaultText: "--replicas", Usage: "most replicas the autoscaler runs"},
		&cli.StringFlag{Name: "health", Usage: "readiness probe path, e.g. /healthz (default: the port accepts connections)"},
		&cli.DurationFlag{Name: "target-p95", Usage: "latency the autoscaler keeps the service under, e.g. 300ms"},
		&cli.IntFlag{Name: "target-concurrency", DefaultText: fmt.Sprint(api.DefaultTargetConcurrency), Usage: "outstanding requests per replica above which one is added"},
		&cli.DurationFlag{Name: "scale-down-after", DefaultText: "2m", Usage: "how long load must stay low before a replica is removed"},
		&cli.BoolFlag{Name: "scale-to-zero", Usage: "run no replica while idle (see --idle-after): the next request waits for a cold start"},
		&cli.DurationFlag{Name: "idle-after", DefaultText: "5m", Usage: "with --scale-to-zero: how long without a request before the replicas go"},
		&cli.DurationFlag{Name: "lease", DefaultText: "1h", Usage: "length of each replica's lease (renewed before it ends)"},
		&cli.StringFlag{Name: "tier", Value: string(terms.Gold), Usage: "gold or silver"},
		&cli.Float64Flag{Name: "max-price", DefaultText: "required unless in --file", Usage: "most you pay per GPU-hour, in USD"},
		&cli.StringSliceFlag{Name: "gpu", Usage: "acceptable GPU model, e.g. H100 (repeatable)"},
		&cli.IntFlag{Name: "count", Value: 1, Usage: "GPUs per replica (with --nodes: per member)"},
		&cli.IntFlag{Name: "nodes", Value: 1, Usage: fmt.Sprintf("members of each replica, up to %d: a gang on that many providers, --count whole GPUs each, placed all or nothing; rank 0 serves --port (the gateway routes to it) and reaches the other ranks over the gang network (MASTER_ADDR, RANK, GPUMESH_PEERS...); a replica that loses a member is replaced whole", terms.MaxNodes)},
		&cli.IntFlag{Name: "min-vram", Usage: "minimum VRAM per GPU, in GB"},
		&cli.StringFlag{Name: "region", Usage: "residency constraint: a region or region prefix, e.g. eu"},
		&cli.StringSliceFlag{Name: "regions", Usage: "spread the replicas over these regions (each a residency as --region), e.g. eu,us: the gateway routes each request to the nearest one with a ready replica (--near's, then the lowest round trip)"},
		&cli.IntFlag{Name: "replicas-per-region", DefaultText: "1", Usage: "replicas in each of --regions at least (--replicas defaults to regions × this)"},
		nearFlag(), maxRTTFlag(),
		&cli.StringFlag{Name: "image", Usage: "container image to run the command in"},
		&cli.GenericFlag{Name: "env", Value: &stringList{}, Usage: "environment variable KEY=VALUE (repeatable)"},
		&cli.IntFlag{Name: "memory-mb", Usage: "memory cap per replica in MB, where the runtime can enforce it"},
		&cli.DurationFlag{Name: "bid-window", DefaultText: terms.DefaultBidWindow.String(), Usage: "how long each replica's auction collects bids"},
		&cli.StringFlag{Name: "public", Usage: "also serve the gateway on this public address, over TLS, to holders of API tokens (serve token add), e.g. 0.0.0.0:8443"},
		&cli.StringSliceFlag{Name: "public-host", Usage: "a name clients reach the public endpoint by (the Host it accepts besides IP addresses; repeatable)"},
		&cli.StringFlag{Name: "tls-cert", Usage: "the public endpoint's certificate, a PEM file (default: a self-signed one, its fingerprint printed)"},
		&cli.StringFlag{Name: "tls-key", Usage: "the key of --tls-cert, a PEM file"},
		&cli.StringFlag{Name: "max-body", DefaultText: "10MiB", Usage: "largest request body the public endpoint takes (413 above), e.g. 1MiB"},
		&cli.Float64Flag{Name: "token-rate", DefaultText: "no limit", Usage: "requests per second each API token may make on average (429 above)"},
		&cli.IntFlag{Name: "token-burst", DefaultText: "--token-rate, rounded up", Usage: "requests an API token may make at once"},
		jsonFlag(),
	}
}

// publicFlags are serve post's flags of the public endpoint.
var publicFlags = []string{"public-host", "tls-cert", "tls-key", "max-body", "token-rate", "token-burst"}

// buildPublic applies c's public endpoint flags to spec.Public (the
// daemon checks the rest). Certificate paths are made absolute: the
// daemon reads them from its own working directory.
func buildPublic(c *cli.Context, spec *api.ServiceSpec) error {
	set := c.IsSet
	if set("public") {
		if spec.Public == nil {
			spec.Public = &api.PublicSpec{}
		}
		spec.Public.Addr = c.String("public")
	}
	for _, f := range publicFlags {
		if set(f) && spec.Public == nil {
			return fmt.Errorf("--%s is for the public endpoint: give --public ADDR too", f)
		}
	}
	p := spec.Public
	if p == nil {
		return nil
	}
	if set("public-host") {
		p.Hosts = c.StringSlice("public-host")
	}
	if set("tls-cert") {
		p.TLSCert = c.String("tls-cert")
	}
	if set("tls-key") {
		p.TLSKey = c.String("tls-key")
	}
	for _, f := range []*string{&p.TLSCert, &p.TLSKey} {
		if *f != "" {
			abs, err := filepath.Abs(*f)
			if err != nil {
				return err
			}
			*f = abs
		}
	}
	if set("max-body") {
		n, err := taskfile.ParseSize(c.String("max-body"))
		if err != nil {
			return fmt.Errorf("--max-body: %w", err)
		}
		p.MaxBody = n
	}
	if set("token-rate") {
		p.Rate = c.Float64("token-rate")
	}
	if set("token-burst") {
		p.Burst = c.Int("token-burst")
	}
	return nil
}

// buildService builds the service described by c's flags, the optional
// service file (--file, or serve post's argument: a service task file or
// an api.ServiceSpec-shaped spec, read by taskfile.ParseService) and the
// command after `--`; explicitly given flags override the file. The
// daemon checks the rest (as it checks each replica's job), but a task
// file's replica job is checked here, its problems naming its lines.
func buildService(c *cli.Context) (api.ServiceSpec, error) {
	var spec api.ServiceSpec
	path, err := fileArg(c, "service", "serve post --json")
	if err != nil {
		return spec, err
	}
	var file *taskfile.File
	if path != "" {
		b, err := readJobFile(path, "service")
		if err != nil {
			return spec, err
		}
		if file, err = taskfile.ParseService(path, b, time.Now()); err != nil {
			return spec, fmt.Errorf("service file %w", err)
		}
		spec = file.ServiceSpec()
	}
	set := c.IsSet
	j := &spec.Job
	if set("id") {
		spec.ID = c.String("id")
	}
	if set("port") {
		j.Run.ServicePort = c.Int("port")
	}
	if set("regions") {
		spec.Regions = c.StringSlice("regions")
	}
	if set("replicas-per-region") {
		spec.ReplicasPerRegion = c.Int("replicas-per-region")
	}
	if set("replicas") || spec.Replicas == 0 && len(spec.Regions) == 0 {
		// With regions the daemon's default is regions × per region.
		spec.Replicas = c.Int("replicas")
	}
	if set("max-replicas") {
		spec.MaxReplicas = c.Int("max-replicas")
	}
	if set("health") {
		spec.Health = c.String("health")
	}
	if set("target-p95") {
		spec.TargetP95 = c.Duration("target-p95")
	}
	if set("target-concurrency") {
		spec.TargetConcurrency = c.Int("target-concurrency")
	}
	if set("scale-down-after") {
		spec.ScaleDownAfter = c.Duration("scale-down-after")
	}
	if set("scale-to-zero") {
		spec.ScaleToZero = c.Bool("scale-to-zero")
	}
	if set("idle-after") {
		spec.IdleAfter = c.Duration("idle-after")
	}
	if set("lease") {
		j.Duration = c.Duration("lease")
	}
	if set("tier") || j.Tier == "" {
		t, err := terms.ParseTier(c.String("tier"))
		if err != nil {
			return spec, fmt.Errorf("unknown tier %q (gold, silver)", c.String("tier"))
		}
		j.Tier = t
	}
	if set("max-price") {
		j.MaxPrice = c.Float64("max-price")
	} else if j.MaxPrice == 0 {
		return spec, errors.New("--max-price is required (USD per GPU-hour)")
	}
	if set("count") || j.GPUCount == 0 {
		j.GPUCount = c.Int("count")
	}
	if err := applyJobFlags(c, j, time.Now(), path != "" && path != c.String("file")); err != nil {
		return spec, err
	}
	if err := buildPublic(c, &spec); err != nil {
		return spec, err
	}
	if j.Run.ServicePort == 0 && file != nil && file.Task {
		return spec, fmt.Errorf("%s: missing resources.ports (the port the server listens on), or give --port", path)
	}
	if j.Run.ServicePort == 0 {
		return spec, errors.New("--port is required (the port the server listens on)")
	}
	if file != nil && file.Task {
		if err := taskfile.CheckReplica(*j); err != nil {
			return spec, invalidJob(c, err, file)
		}
	}
	if len(j.Run.Command) == 0 {
		return spec, errors.New("no command: put it after -- (e.g. gpumesh serve post --port 8000 --max-price 2 -- python serve.py)")
	}
	return spec, nil
}

func servePostAction(c *cli.Context) error {
	spec, err := buildService(c)
	if err != nil {
		return err
	}
	v, err := client(c).PostService(c.Context, spec)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	fmt.Fprintf(c.App.Writer, "service %s: gateway http://%s (%d..%d replicas, leasing)\n", v.ID, v.Gateway, v.Spec.Replicas, v.Spec.MaxReplicas)
	printGatewayToken(c.App.Writer, &v)
	printPublic(c.App.Writer, &v)
	if v.Public != nil {
		fmt.Fprintf(c.App.Writer, "           its end users need API tokens: gpumesh serve token add %s NAME\n", v.ID)
	}
	return nil
}

// printPublic describes the public endpoint: where, its certificate, its
// limits.
func printPublic(w io.Writer, v *api.ServiceView) {
	p, spec := v.Public, v.Spec.Public
	if p == nil || spec == nil {
		return
	}
	if p.Error != "" {
		fmt.Fprintf(w, "public:    not served: %s\n", p.Error)
		return
	}
	cert := "certificate"
	if p.CertPEM != "" {
		cert = "self-signed certificate (PEM in serve status --json: public.cert_pem)"
	}
	fmt.Fprintf(w, "public:    %s, %s sha256 %s\n", p.URL, cert, p.Fingerprint)
	limit := "no rate limit"
	if spec.Rate > 0 {
		limit = fmt.Sprintf("%.4g req/s (burst %d) per token", spec.Rate, spec.Burst)
	}
	fmt.Fprintf(w, "           %d API token(s) (Authorization: Bearer), bodies up to %d bytes, %s%s\n", p.Tokens, spec.MaxBody, limit,
		prefixed(", hosts ", strings.Join(spec.Hosts, " ")))
}

func serveTokenAddAction(c *cli.Context) error {
	id, name, err := twoArgs(c, "service ID", "token NAME")
	if err != nil {
		return err
	}
	t, err := client(c).AddServiceToken(c.Context, id, name)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, t)
	}
	fmt.Fprintf(c.App.Writer, "token %s: %s\n(shown only now; send it as Authorization: Bearer TOKEN)\n", t.Name, t.Token)
	return nil
}

func serveTokenListAction(c *cli.Context) error {
	id, err := jobArg(c, "service ID")
	if err != nil {
		return err
	}
	ts, err := client(c).ServiceTokens(c.Context, id)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, ts)
	}
	if len(ts) == 0 {
		fmt.Fprintln(c.App.Writer, "no API tokens")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMADE\tREQUESTS\tRATE-LIMITED")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", t.Name, fmtTime(t.Created), t.Requests, t.Limited)
	}
	return tw.Flush()
}

func serveTokenRevokeAction(c *cli.Context) error {
	id, name, err := twoArgs(c, "service ID", "token NAME")
	if err != nil {
		return err
	}
	t, err := client(c).RevokeServiceToken(c.Context, id, name)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, t)
	}
	fmt.Fprintf(c.App.Writer, "token %s revoked\n", t.Name)
	return nil
}

func serveListAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	vs, err := client(c).Services(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, vs)
	}
	if len(vs) == 0 {
		fmt.Fprintln(c.App.Writer, "no services")
		return nil
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tGATEWAY\tREADY/DESIRED\tBOUNDS\tREQ/S\tP95 MS\tERRORS\tSTATE")
	for _, v := range vs {
		state := "running"
		switch {
		case v.Stopped:
			state = "stopped"
		case v.ScaledToZero:
			state = "scaled to zero"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d..%d\t%.1f\t%.1f\t%d\t%s\n", v.ID, v.Gateway, v.Ready, v.Desired,
			v.Spec.Replicas, v.Spec.MaxReplicas, v.Totals.RatePerSec, v.Totals.P95MS, v.Totals.Errors, state)
	}
	return tw.Flush()
}

func serveStatusAction(c *cli.Context) error {
	id, err := jobArg(c, "service ID")
	if err != nil {
		return err
	}
	v, err := client(c).Service(c.Context, id)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	printServiceView(c.App.Writer, &v, peerNames(c))
	return nil
}

// printGatewayToken tells the owner how to reach the gateway: every
// request carries the service's token.
func printGatewayToken(w io.Writer, v *api.ServiceView) {
	if v.Token != "" {
		fmt.Fprintf(w, "token:     %s (send it as the X-Gpumesh-Token header or ?token=)\n", v.Token)
	}
}

// printServiceView prints a service's status, peers named by peer.
func printServiceView(w io.Writer, v *api.ServiceView, peer func(string) string) {
	j := &v.Spec.Job
	state := "running"
	if v.Stopped {
		state = "stopped"
	}
	fmt.Fprintf(w, "service:   %s (%s)\n", v.ID, state)
	fmt.Fprintf(w, "gateway:   http://%s\n", v.Gateway)
	printGatewayToken(w, v)
	printPublic(w, v)
	fmt.Fprintf(w, "command:   %s (port %d%s)\n", strings.Join(j.Run.Command, " "), j.Run.ServicePort, prefixed(", health ", v.Spec.Health))
	fmt.Fprintf(w, "replicas:  %d ready, %d desired, bounds %d..%d\n", v.Ready, v.Desired, v.Spec.Replicas, v.Spec.MaxReplicas)
	if v.Spec.ScaleToZero {
		state := "awake"
		if v.ScaledToZero {
			state = "scaled to zero: the next request waits for a cold start"
		}
		cold := "none yet"
		if v.ColdStarts > 0 {
			cold = fmt.Sprintf("%d, the last %s", v.ColdStarts, time.Duration(v.LastColdStartMS*float64(time.Millisecond)).Round(time.Millisecond))
		}
		fmt.Fprintf(w, "idle:      scales to zero after %s idle; %s; cold starts: %s\n", v.Spec.IdleAfter, state, cold)
	}
	gpus := fmt.Sprintf("%d GPU(s) each", j.GPUCount)
	if j.Nodes > 1 {
		gpus = fmt.Sprintf("each a gang of %d × %d GPU(s)", j.Nodes, j.GPUCount)
	}
	fmt.Fprintf(w, "leases:    %s, %s, %s, max $%.4g/GPU-h%s%s\n", j.Tier, gpus, j.Duration, j.MaxPrice,
		prefixed(", region ", j.Region), prefixed(", near ", j.Near))
	for _, g := range v.Regions {
		rank, rtt := "not routed (none ready)", "-"
		if g.Rank > 0 {
			rank = fmt.Sprintf("routing rank %d", g.Rank)
		}
		if g.RTTMS > 0 {
			rtt = fmt.Sprintf("%.1f ms", g.RTTMS)
		}
		fmt.Fprintf(w, "region:    %s: %d ready of %d, rtt %s, %s\n", g.Region, g.Ready, g.Want, rtt, rank)
	}
	if v.Spec.TargetP95 > 0 {
		fmt.Fprintf(w, "target:    p95 %s, scale down after %s\n", v.Spec.TargetP95, v.Spec.ScaleDownAfter)
	}
	t := v.Totals
	fmt.Fprintf(w, "traffic:   %d requests, %d errors, %d retried, %.1f req/s, p50 %.2f p95 %.2f p99 %.2f ms\n",
		t.Requests, t.Errors, v.Retries, t.RatePerSec, t.P50MS, t.P95MS, t.P99MS)
	fmt.Fprintf(w, "cost:      %.3f GPU-h, $%.4f at the lease prices, $%.4f per 1,000 requests\n", t.GPUSeconds/3600, t.CostUSD, t.USDPer1kRequests)
	if t.PromptTokens+t.CompletionTokens > 0 {
		fmt.Fprintf(w, "tokens:    %d prompt + %d completion, %.1f tokens/s, $%.4f per 1M tokens\n",
			t.PromptTokens, t.CompletionTokens, t.TokensPerSec, t.USDPer1MTokens)
	}
	if len(v.Replicas) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tPROVIDER\tREGION\tRTT MS\tSTATE\tLEASE END\tINFLIGHT\tREQUESTS\tREQ/S\tP50 MS\tP95 MS\tP99 MS\tERR %\tCOST $\t$/1K REQ\tTOK/S\t$/1M TOK")
		for _, r := range v.Replicas {
			st := r.State
			if r.Renewing {
				st += " (renewing)"
			}
			end := "-"
			if !r.LeaseEnd.IsZero() {
				end = r.LeaseEnd.Local().Format(time.TimeOnly)
			}
			region := orDash(r.ProviderRegion)
			if r.Region != "" && r.Region != r.ProviderRegion {
				region = r.Region + " (" + region + ")"
			}
			rtt := "-"
			if r.RTTMS > 0 {
				rtt = fmt.Sprintf("%.1f", r.RTTMS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.1f\t%.2f\t%.2f\t%.2f\t%.1f\t%.4f\t%.4f\t%.1f\t%.4f\n", r.JobID, orDash(peer(r.Provider)), region, rtt, st, end,
				r.Outstanding, r.Requests, r.RatePerSec, r.P50MS, r.P95MS, r.P99MS, 100*r.ErrorRate,
				r.CostUSD, r.USDPer1kRequests, r.TokensPerSec, r.USDPer1MTokens)
		}
		_ = tw.Flush()
	}
	for _, r := range v.Replicas {
		if len(r.Members) == 0 {
			continue
		}
		// A gang replica's members: the row above is rank 0's.
		ms := make([]string, len(r.Members))
		for i, m := range r.Members {
			ms[i] = fmt.Sprintf("%d %s %s", m.Rank, orDash(peer(m.Provider)), orDash(string(m.Run)))
		}
		fmt.Fprintf(w, "gang:      %s: %s\n", r.JobID, strings.Join(ms, ", "))
	}
	for _, e := range v.Events[max(0, len(v.Events)-10):] {
		fmt.Fprintf(w, "event:     %s %s\n", fmtTime(e.Time), e.What)
	}
}

func serveScaleAction(c *cli.Context) error {
	id, err := jobArg(c, "service ID")
	if err != nil {
		return err
	}
	req := api.ScaleRequest{Replicas: c.Int("replicas"), MaxReplicas: c.Int("max-replicas")}
	if req.Replicas == 0 && req.MaxReplicas == 0 {
		return errors.New("give --replicas and/or --max-replicas")
	}
	v, err := client(c).ScaleService(c.Context, id, req)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	fmt.Fprintf(c.App.Writer, "service %s: bounds %d..%d, %d desired, %d ready\n", v.ID, v.Spec.Replicas, v.Spec.MaxReplicas, v.Desired, v.Ready)
	return nil
}

func serveStopAction(c *cli.Context) error {
	id, err := jobArg(c, "service ID")
	if err != nil {
		return err
	}
	v, err := client(c).StopService(c.Context, id)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	fmt.Fprintf(c.App.Writer, "service %s stopped\n", v.ID)
	return nil
}
