package policy

import (
	"fmt"
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

// provisioningState is what the provisioning keys note.
type provisioningState struct {
	min, max     *yaml.Node
	revenueGiven bool
}

// provisioning decodes an app's provisioning section. revenueGiven reports
// whether revenue was written (otherwise it follows sla.revenue; see app).
func (d *decoder) provisioning(n *yaml.Node, path string, pr *Provisioning) (revenueGiven bool) {
	var st provisioningState
	d.mapping(n, path, d.provisioningFields(pr, &st))
	if pr.MaxServers > 0 && pr.MaxServers < pr.MinServers {
		at, p := st.max, joinPath(path, "max_servers")
		if at == nil {
			at, p = st.min, joinPath(path, "min_servers")
		}
		d.errorf(at, p, "max_servers %d is below min_servers %d; raise it, or 0 for no ceiling", pr.MaxServers, pr.MinServers)
	}
	return st.revenueGiven
}

func (d *decoder) provisioningFields(pr *Provisioning, st *provisioningState) []field {
	revenue := d.numField(&pr.Revenue, atLeast(0))
	setRevenue := revenue.set
	revenue.set = func(v *yaml.Node, p string) { st.revenueGiven = true; setRevenue(v, p) }
	return []field{
		{"target", d.durationField(&pr.Target, 0)},
		{"window", d.durationField(&pr.Window, time.Second)},
		{"f_drop", d.numField(&pr.FDrop, numRange{lo: 0, hi: 1, loOpen: true, hiOpen: true})},
		{"spacing", d.durationField(&pr.Spacing, time.Nanosecond)},
		{"max_step", d.intField(&pr.MaxStep, 1, maxProvisionServers)},
		{"min_servers", noting(&st.min, d.intField(&pr.MinServers, 0, maxProvisionServers))},
		{"max_servers", noting(&st.max, d.intField(&pr.MaxServers, 0, maxProvisionServers))},
		{"webhook", d.optional(func() bool { return pr.Webhook != nil },
			func() []field { return d.webhookFields(orNew(pr.Webhook, newWebhook)) },
			func(v *yaml.Node, p string) { pr.Webhook = d.webhook(v, p) })},
		{"revenue", revenue},
		{"t_prov", d.durationField(&pr.TProv, time.Second)},
	}
}

func newWebhook() *Webhook { return &Webhook{Timeout: 5 * time.Second, Retries: 2} }

func (d *decoder) webhook(n *yaml.Node, path string) *Webhook {
	w := newWebhook()
	if !d.mapping(n, path, d.webhookFields(w)) || w.URL == "" {
		return nil
	}
	return w
}

func (d *decoder) webhookFields(w *Webhook) []field {
	url := d.textField(&w.URL, false, func(s string) (string, error) {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("%q is not an http:// or https:// URL", s)
		}
		return s, nil
	})
	// The dump masks what may be a credential: the password and the query.
	url.get = func() *yaml.Node { return strNode(redactURL(w.URL)) }
	return []field{
		{"url", url.need("")},
		{"timeout", d.durationField(&w.Timeout, time.Millisecond)},
		{"retries", d.intField(&w.Retries, 0, maxWebhookRetries)},
	}
}

// partitionState is where the partition keys were written.
type partitionState struct{ idx, from, count *yaml.Node }

// partition decodes an app's partition section: {count, index} or
// {count, index_from_hostname: true}.
func (d *decoder) partition(n *yaml.Node, path string, pt *Partition) {
	var st partitionState
	if !d.mapping(n, path, d.partitionFields(pt, &st)) || st.count == nil {
		return
	}
	if st.idx != nil && st.from != nil && pt.FromHostname {
		d.errorf(st.from, joinPath(path, "index_from_hostname"), "give index or index_from_hostname, not both")
		return
	}
	if pt.FromHostname {
		host, err := d.hostname()
		if err != nil {
			d.errorf(st.from, joinPath(path, "index_from_hostname"), "cannot read the host name: %v", err)
			return
		}
		i, err := HostnameOrdinal(host)
		if err != nil {
			d.errorf(st.from, joinPath(path, "index_from_hostname"), "%v", err)
			return
		}
		if i >= pt.Count {
			d.errorf(st.from, joinPath(path, "index_from_hostname"), "host name %q gives index %d, not below count %d", host, i, pt.Count)
			return
		}
		pt.Index = i
		return
	}
	if st.idx == nil {
		d.errorf(n, path, "index is required (or index_from_hostname: true)")
		return
	}
	if pt.Index >= pt.Count {
		d.errorf(st.idx, joinPath(path, "index"), "%d is out of range; must be below count %d", pt.Index, pt.Count)
	}
}

func (d *decoder) partitionFields(pt *Partition, st *partitionState) []field {
	idx := d.intField(&pt.Index, 0, maxPartitionCount-1)
	idx.get = func() *yaml.Node {
		if pt.Count == 0 || pt.FromHostname {
			return nil // from the host name: the dump serves every replica
		}
		return intNode(int64(pt.Index))
	}
	from := d.boolField(&pt.FromHostname)
	from.get = func() *yaml.Node {
		n := boolNode(pt.FromHostname)
		if pt.FromHostname {
			n.LineComment = "# index " + strconv.Itoa(pt.Index) + " here"
		}
		return n
	}
	return []field{
		{"count", noting(&st.count, d.intField(&pt.Count, 1, maxPartitionCount)).need("")},
		{"index", noting(&st.idx, idx)},
		{"index_from_hostname", noting(&st.from, from)},
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
