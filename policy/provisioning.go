package policy

import (
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Provisioning tunes the app's provisioning advice (Cataclysm §4–5,
// package provision): the G/G/1 model's servers-needed count, the
// reactive trigger and its webhook, and the revenue figures of the
// /provisioning advice. It only advises: sentry never adds servers itself.
type Provisioning struct {
	// Target is the mean response time one server must keep (E[R] of
	// eq. 9). 0 means the QoS table's target for the predicted arrival
	// rate (sla.targets). Default 0.
	Target time.Duration
	// Window is the span the drop fraction is measured over. Default 5m.
	Window time.Duration
	// FDrop is the drop fraction over Window above which sentry asks for
	// servers, in (0, 1). Default 0.5.
	FDrop float64
	// Spacing is the least time between two asks (δ). Default 5m.
	Spacing time.Duration
	// MaxStep is the most servers one ask asks for (Δ), ≥ 1. Default 1.
	MaxStep int
	// MinServers is the floor of servers needed (the SLA's k_min), ≥ 0.
	// Default 1.
	MinServers int
	// MaxServers is the ceiling of servers needed and of the asks; 0 means
	// none. Default 0.
	MaxServers int
	// Webhook, when set, receives each ask as a JSON POST. Default none.
	Webhook *Webhook
	// Revenue is r of eq. 10, the revenue per admitted request. Default:
	// the app's sla.revenue.
	Revenue float64
	// TProv is T_prov of eq. 10, the length of a provisioning cycle.
	// Default 30m (the paper's cycle).
	TProv time.Duration
}

// Webhook is where reactive asks are POSTed.
type Webhook struct {
	// URL is an http or https URL. Required.
	URL string
	// Timeout bounds one attempt. Default 5s.
	Timeout time.Duration
	// Retries is how many times a failed attempt is retried, 0–10.
	// Default 2.
	Retries int
}

// Partition is this sentry's share of the app's backends when several
// sentries guard one farm (docs/algorithms.md §5; lb.Partition). Count 0
// or 1 means this sentry owns every backend.
type Partition struct {
	// Index is this sentry's index, 0 ≤ Index < Count. With
	// index_from_hostname it is the host name's trailing -N.
	Index int
	// Count is the number of sentries sharing the farm. Default 0 (no
	// partition).
	Count int
	// FromHostname: Index was taken from the host name (a StatefulSet
	// pod's ordinal, "sentry-2" → 2) when the policy was loaded.
	FromHostname bool
}

// Limits of the provisioning keys.
const (
	maxProvisionServers = 1 << 20
	maxWebhookRetries   = 10
	maxPartitionCount   = 1024
)

func defaultProvisioning() Provisioning {
	return Provisioning{
		Window:     5 * time.Minute,
		FDrop:      0.5,
		Spacing:    5 * time.Minute,
		MaxStep:    1,
		MinServers: 1,
		TProv:      30 * time.Minute,
	}
}

// provisioning decodes an app's provisioning section. revenueGiven reports
// whether revenue was written (otherwise it follows sla.revenue; see app).
func (d *decoder) provisioning(n *yaml.Node, path string, pr *Provisioning) (revenueGiven bool) {
	var minN, maxN *yaml.Node
	d.mapping(n, path, []field{
		{"target", d.durationField(&pr.Target, 0)},
		{"window", d.durationField(&pr.Window, time.Second)},
		{"f_drop", d.numField(&pr.FDrop, numRange{lo: 0, hi: 1, loOpen: true, hiOpen: true})},
		{"spacing", d.durationField(&pr.Spacing, time.Nanosecond)},
		{"max_step", d.intField(&pr.MaxStep, 1, maxProvisionServers)},
		{"min_servers", func(v *yaml.Node, p string) { minN = v; d.intField(&pr.MinServers, 0, maxProvisionServers)(v, p) }},
		{"max_servers", func(v *yaml.Node, p string) { maxN = v; d.intField(&pr.MaxServers, 0, maxProvisionServers)(v, p) }},
		{"webhook", func(v *yaml.Node, p string) { pr.Webhook = d.webhook(v, p) }},
		{"revenue", func(v *yaml.Node, p string) { revenueGiven = true; d.numField(&pr.Revenue, atLeast(0))(v, p) }},
		{"t_prov", d.durationField(&pr.TProv, time.Second)},
	})
	if pr.MaxServers > 0 && pr.MaxServers < pr.MinServers {
		at, p := maxN, joinPath(path, "max_servers")
		if at == nil {
			at, p = minN, joinPath(path, "min_servers")
		}
		d.errorf(at, p, "max_servers %d is below min_servers %d; raise it, or 0 for no ceiling", pr.MaxServers, pr.MinServers)
	}
	return revenueGiven
}

func (d *decoder) webhook(n *yaml.Node, path string) *Webhook {
	w := &Webhook{Timeout: 5 * time.Second, Retries: 2}
	sawURL := false
	ok := d.mapping(n, path, []field{
		{"url", func(v *yaml.Node, p string) {
			sawURL = true
			s, ok := d.str(v, p)
			if !ok {
				return
			}
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				d.errorf(v, p, "%q is not an http:// or https:// URL", s)
				return
			}
			w.URL = s
		}},
		{"timeout", d.durationField(&w.Timeout, time.Millisecond)},
		{"retries", d.intField(&w.Retries, 0, maxWebhookRetries)},
	})
	if !ok {
		return nil
	}
	if !sawURL {
		d.errorf(n, path, "url is required")
		return nil
	}
	if w.URL == "" {
		return nil
	}
	return w
}

// partition decodes an app's partition section: {count, index} or
// {count, index_from_hostname: true}.
func (d *decoder) partition(n *yaml.Node, path string, pt *Partition) {
	var idxN, fromN, countN *yaml.Node
	ok := d.mapping(n, path, []field{
		{"count", func(v *yaml.Node, p string) { countN = v; d.intField(&pt.Count, 1, maxPartitionCount)(v, p) }},
		{"index", func(v *yaml.Node, p string) { idxN = v; d.intField(&pt.Index, 0, maxPartitionCount-1)(v, p) }},
		{"index_from_hostname", func(v *yaml.Node, p string) { fromN = v; d.boolField(&pt.FromHostname)(v, p) }},
	})
	if !ok {
		return
	}
	if countN == nil {
		d.errorf(n, path, "count is required")
		return
	}
	if idxN != nil && fromN != nil && pt.FromHostname {
		d.errorf(fromN, joinPath(path, "index_from_hostname"), "give index or index_from_hostname, not both")
		return
	}
	if pt.FromHostname {
		host, err := d.hostname()
		if err != nil {
			d.errorf(fromN, joinPath(path, "index_from_hostname"), "cannot read the host name: %v", err)
			return
		}
		i, err := HostnameOrdinal(host)
		if err != nil {
			d.errorf(fromN, joinPath(path, "index_from_hostname"), "%v", err)
			return
		}
		if i >= pt.Count {
			d.errorf(fromN, joinPath(path, "index_from_hostname"), "host name %q gives index %d, not below count %d", host, i, pt.Count)
			return
		}
		pt.Index = i
		return
	}
	if idxN == nil {
		d.errorf(n, path, "index is required (or index_from_hostname: true)")
		return
	}
	if pt.Index >= pt.Count {
		d.errorf(idxN, joinPath(path, "index"), "%d is out of range; must be below count %d", pt.Index, pt.Count)
	}
}

// HostnameOrdinal returns the trailing -N of a host name, as a
// StatefulSet names its pods ("sentry-2" → 2). A fully qualified name is
// cut at its first dot first.
func HostnameOrdinal(host string) (int, error) {
	h, _, _ := strings.Cut(host, ".")
	i := strings.LastIndexByte(h, '-')
	if i < 0 || i == len(h)-1 {
		return 0, hostnameError(host)
	}
	n, err := strconv.Atoi(h[i+1:])
	if err != nil || n < 0 || h[i+1] == '+' || n >= math.MaxInt32 {
		return 0, hostnameError(host)
	}
	return n, nil
}

type hostnameError string

func (h hostnameError) Error() string {
	return "host name " + strconv.Quote(string(h)) + " does not end in -N (a StatefulSet ordinal such as sentry-0)"
}
