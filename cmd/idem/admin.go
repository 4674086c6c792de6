package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// stateFilters are the values of list --state.
var stateFilters = map[string]idemv1.State{
	"":           idemv1.State_STATE_UNSPECIFIED,
	"processing": idemv1.State_STATE_PROCESSING,
	"completed":  idemv1.State_STATE_COMPLETED,
	"failed":     idemv1.State_STATE_FAILED,
	"released":   idemv1.State_STATE_RELEASED,
	"expired":    idemv1.State_STATE_EXPIRED,
	"unresolved": idemv1.State_STATE_UNRESOLVED,
}

// tenantFlags pick whose records an AdminService command acts on: your
// tenant's when both are unset. Naming another tenant takes an operator
// tenant (operator: true in idemd's config).
type tenantFlags struct {
	Tenant     string `xor:"tenant" placeholder:"TENANT" help:"Act on this tenant's records instead of your own (an operator tenant only)."`
	AllTenants bool   `xor:"tenant" help:"Act on the records of every tenant in idemd's config (an operator tenant only)."`
}

// crossTenant reports whether the answer may hold other tenants' records,
// which is when a table shows whose each row is.
func (f tenantFlags) crossTenant() bool { return f.Tenant != "" || f.AllTenants }

// operatorHelp ends the help of the commands with tenantFlags.
const operatorHelp = ` An operator tenant (operator: true in idemd's config) may name another tenant with --tenant, or every tenant with --all-tenants; the table then has a TENANT column, and idemd logs the call. Others get exit 18 for either flag.`

// ---- list ----

type listCmd struct {
	Namespace string        `short:"n" placeholder:"NS" help:"Only records of this namespace (all when unset)."`
	State     string        `placeholder:"STATE" help:"Only records in this state: processing, completed, failed, released, expired or unresolved (all when unset)."`
	OlderThan time.Duration `placeholder:"DURATION" help:"Only records unchanged for at least this long (with --state processing: claims that stopped heartbeating)."`
	KeyPrefix string        `placeholder:"PREFIX" help:"Only records whose key starts with this (compared bytewise; all when unset)."`
	PageSize  int32         `placeholder:"N" help:"Records per page, 1 to 1000 (idemd's default, 100, when unset)."`
	PageToken string        `placeholder:"TOKEN" help:"Start at this page: the nextPageToken of an earlier list."`
	All       bool          `help:"Follow the page tokens and list every matching record."`
	tenantFlags
}

func (listCmd) Help() string {
	return `List pages through records of your tenant, ordered by namespace, then key. Without --all it prints one page and, when there are more, says on stderr how to get the next one. With -o json it prints a ListRecordsResponse; with --all, one response holding every record. It calls the AdminService: when idemd runs with tenants, only a tenant with admin: true in idemd's config may use it; others get exit 18.` + operatorHelp + `

Example:

    # claims that have not heartbeated for ten minutes: stuck workers
    idem list --state processing --older-than 10m --all
    idem list -n process_payment --state failed -o json | jq -r '.records[].key'
    # the records of one customer's orders, keyed order-<customer>-<n>
    idem list -n process_payment --key-prefix order-c42- --all
    # an operator: stuck claims of every tenant
    idem list --all-tenants --state processing --older-than 10m --all`
}

func (c *listCmd) Run(a *app) error {
	state, ok := stateFilters[strings.TrimPrefix(strings.ToLower(c.State), "state_")]
	if !ok {
		return usageError("--state %q is not a state: pass processing, completed, failed, released, expired or unresolved", c.State)
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	req := &idemv1.ListRecordsRequest{
		Namespace:  c.Namespace,
		State:      state,
		OlderThan:  durationProto(c.OlderThan),
		KeyPrefix:  c.KeyPrefix,
		PageSize:   c.PageSize,
		PageToken:  c.PageToken,
		Tenant:     c.Tenant,
		AllTenants: c.AllTenants,
	}
	all := &idemv1.ListRecordsResponse{}
	for {
		page, err := call(a, "list", conn.AdminService().ListRecords, req)
		if err != nil {
			return err
		}
		all.Records = append(all.Records, page.GetRecords()...)
		all.NextPageToken = page.GetNextPageToken()
		if !c.All || page.GetNextPageToken() == "" {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
	if a.json() {
		return a.printJSON(all)
	}
	if err := printRecords(a.stdout, all.GetRecords(), c.crossTenant()); err != nil {
		return err
	}
	if all.GetNextPageToken() != "" {
		a.say("%d records shown, and there are more: add --page-token %s for the next page, or --all for every one", len(all.GetRecords()), all.GetNextPageToken())
	}
	return nil
}

// ---- delete ----

type deleteCmd struct {
	recordFlags
	Tenant string `placeholder:"TENANT" help:"Delete the record of this tenant instead of your own (an operator tenant only)."`
	Reason string `placeholder:"TEXT" help:"Why, kept on the key's timeline with the deletion (at most 1024 bytes)."`
}

func (deleteCmd) Help() string {
	return `Delete evicts one record whatever its state. The next claim of the key creates it afresh (attempt 1) with a token greater than any before, and a worker still holding the old token gets exit 13 (not found) on complete. Use it to let a job that failed permanently run again. It calls the AdminService: when idemd runs with tenants, only a tenant with admin: true in idemd's config may use it; others get exit 18. An operator tenant (operator: true) may delete another tenant's record with --tenant; idemd logs the call.

Exit codes:

    0   deleted; the record as it was is shown with -o json
    13  no such record

` + otherExitCodes + `

Example:

    idem delete -n process_payment -k order-1042
    idem delete --tenant payments -n process_payment -k order-1042   # an operator`
}

func (c *deleteCmd) Run(a *app) error {
	conn, err := a.client()
	if err != nil {
		return err
	}
	name := c.name()
	if c.Tenant != "" {
		name += " of tenant " + c.Tenant
	}
	resp, err := call(a, "delete "+name, conn.AdminService().DeleteRecord,
		&idemv1.DeleteRecordRequest{Namespace: c.Namespace, Key: c.Key, Tenant: c.Tenant, Reason: c.Reason})
	if err != nil {
		return err
	}
	rec := resp.GetRecord()
	a.say("deleted %s; it was %s with token %d after %d attempt(s)", name, stateName(rec.GetState()), rec.GetToken(), rec.GetAttempt())
	if a.json() {
		return a.printJSON(resp)
	}
	return nil
}

// ---- resolve ----

type resolveCmd struct {
	recordFlags
	Completed  bool   `xor:"how" required:"" help:"The job is done: the record becomes COMPLETED with the result (empty unless --result or --result-file)."`
	Failed     bool   `xor:"how" required:"" help:"The job failed for good: the record becomes FAILED with --error."`
	Release    bool   `xor:"how" required:"" help:"The job should run again: the record becomes RELEASED and the next claim acquires it."`
	Result     string `xor:"result" placeholder:"STRING" help:"With --completed: the result to store and replay to later claims."`
	ResultFile string `xor:"result" placeholder:"FILE|-" help:"With --completed: read the result's bytes from this file (- for stdin)."`
	Error      string `placeholder:"TEXT" help:"With --failed: the error to store and replay to later claims."`
	Tenant     string `placeholder:"TENANT" help:"Resolve the record of this tenant instead of your own (an operator tenant only)."`
	Reason     string `placeholder:"TEXT" help:"Why: what you checked downstream, kept on the record's timeline and in idemd's audit log (at most 1024 bytes)."`
	LeaseToken int64  `name:"lease-token" placeholder:"N" help:"Resolve only if the record is still held with this token (the one idem list or lookup showed): one taken over and held again since is refused with exit 14."`
}

func (resolveCmd) Help() string {
	return `Resolve decides an UNRESOLVED record: one whose lease ran out under a policy with on_lease_expiry: hold, so that no claim took it over. Check whether the side effect happened (the downstream system, the fencing token), then record it: --completed (with the result), --failed (with the error), or --release to let the next claim run the job again with a new, greater token. It calls the AdminService: when idemd runs with tenants, only a tenant with admin: true in idemd's config may use it; others get exit 18.

Exit codes:

    0   resolved; the record is shown with -o json
    13  no such record
    14  --lease-token is not the record's token: it was taken over and held
        again since
    21  the record is not UNRESOLVED (its holder or another operator resolved it
        first; the same --completed or --failed sent again answers 0)

` + otherExitCodes + `

Examples:

    idem list --state unresolved
    idem resolve -n process_payment -k order-1042 --completed --result-file receipt.json --reason "charge ch_123 found"
    idem resolve -n process_payment -k order-1042 --failed --error "card declined; refunded by hand"
    idem resolve -n process_payment -k order-1042 --release --lease-token 7 --reason "no charge with this key"
    idem lookup -n process_payment -k order-1042 --history   # who resolved it, and why`
}

func (c *resolveCmd) Run(a *app) error {
	req := &idemv1.ResolveRecordRequest{Namespace: c.Namespace, Key: c.Key, Tenant: c.Tenant, Reason: c.Reason, Token: c.LeaseToken}
	switch {
	case c.Completed:
		if c.Error != "" {
			return usageError("--error goes with --failed, not --completed")
		}
		result := []byte(c.Result)
		if c.ResultFile != "" {
			var err error
			if result, err = a.readInput("--result-file", c.ResultFile); err != nil {
				return err
			}
		}
		req.Resolution = &idemv1.ResolveRecordRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: result}}
	case c.Failed:
		if c.Result != "" || c.ResultFile != "" {
			return usageError("--result and --result-file go with --completed, not --failed")
		}
		if c.Error == "" {
			return usageError("--failed needs --error: the error later claims replay")
		}
		req.Resolution = &idemv1.ResolveRecordRequest_Failed{Failed: &idemv1.ResolveFailed{Error: c.Error}}
	default:
		if c.Result != "" || c.ResultFile != "" || c.Error != "" {
			return usageError("--release takes no --result, --result-file or --error")
		}
		req.Resolution = &idemv1.ResolveRecordRequest_Released{Released: &idemv1.ResolveReleased{}}
	}
	conn, err := a.client()
	if err != nil {
		return err
	}
	resp, err := call(a, "resolve "+c.name(), conn.AdminService().ResolveRecord, req)
	if err != nil {
		return err
	}
	rec := resp.GetRecord()
	a.say("resolved %s: it is now %s (token %d)", c.name(), stateName(rec.GetState()), rec.GetToken())
	if a.json() {
		return a.printJSON(resp)
	}
	return nil
}

// ---- stats ----

type statsCmd struct {
	Namespace string `short:"n" placeholder:"NS" help:"Only this namespace (all when unset)."`
	tenantFlags
}

func (statsCmd) Help() string {
	return `Stats counts your tenant's records per namespace and state; states without records are left out. It calls the AdminService: when idemd runs with tenants, only a tenant with admin: true in idemd's config may use it; others get exit 18.` + operatorHelp + `

Example:

    idem stats
    idem stats --all-tenants   # an operator: every tenant's counts
    idem stats -n process_payment -o json | jq '.rows[] | select(.state == "STATE_PROCESSING") | .count'`
}

func (c *statsCmd) Run(a *app) error {
	conn, err := a.client()
	if err != nil {
		return err
	}
	resp, err := call(a, "stats", conn.AdminService().Stats,
		&idemv1.StatsRequest{Namespace: c.Namespace, Tenant: c.Tenant, AllTenants: c.AllTenants})
	if err != nil {
		return err
	}
	if a.json() {
		return a.printJSON(resp)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	tenantColumn := func(tenant string) {
		if c.crossTenant() {
			fmt.Fprint(tw, tenant+"\t")
		}
	}
	tenantColumn("TENANT")
	fmt.Fprintln(tw, "NAMESPACE\tSTATE\tCOUNT")
	for _, r := range resp.GetRows() {
		tenantColumn(r.GetTenant())
		fmt.Fprintf(tw, "%s\t%s\t%d\n", r.GetNamespace(), stateName(r.GetState()), r.GetCount())
	}
	return tw.Flush()
}
