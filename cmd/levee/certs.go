package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leveeproxy/levee/internal/acme"
	"github.com/leveeproxy/levee/internal/config"
)

const certsUsage = `usage:
  levee certs list [--config FILE | --admin URL] [--expiring DURATION] [--json]
  levee certs show NAME [--config FILE | --admin URL]
  levee certs renew NAME [--config FILE | --admin URL]

The ACME certificates (tls.acme) of a running levee, read from its admin
API: each one's name, issuer, expiry, next renewal and last error. renew
renews one now, within the budgets, on the instance asked (with --config,
the admin token is read from admin.token_file).
`

// certsTimeout bounds a list or show; renew waits for the CA.
const (
	certsTimeout      = 15 * time.Second
	certsRenewTimeout = 4 * time.Minute
)

func certsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "show" && args[0] != "renew") {
		fmt.Fprint(stderr, certsUsage)
		return exitUsage
	}
	sub, args := args[0], args[1:]
	var name string
	if sub != "list" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(stderr, "levee certs %s: want a NAME\n\n%s", sub, certsUsage)
			return exitUsage
		}
		name, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("certs "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "read the admin address (and token) from this levee config")
	admin := fs.String("admin", "", "the admin API's URL (default: the config's admin.addr, else "+config.DefaultAdmin+")")
	expiring := fs.Duration("expiring", 0, "list: only certificates expiring within this (e.g. 336h)")
	asJSON := fs.Bool("json", false, "list, show: print JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 || (*cfgPath != "" && *admin != "") {
		fmt.Fprintf(stderr, "levee certs %s: unexpected arguments, or both --config and --admin\n", sub)
		return exitUsage
	}
	base, err := topAdmin(*admin, *cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "levee certs: %v\n", err)
		return 1
	}
	c := certsClient{base: base, http: &http.Client{}}
	if *cfgPath != "" && sub == "renew" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintf(stderr, "levee certs: %v\n", err)
			return 1
		}
		if c.token, err = cfg.Admin.Token(); err != nil {
			fmt.Fprintf(stderr, "levee certs: %v\n", err)
			return 1
		}
	}
	switch sub {
	case "list":
		err = c.list(ctx, *expiring, *asJSON, stdout)
	case "show":
		err = c.show(ctx, name, *asJSON, stdout)
	case "renew":
		err = c.renew(ctx, name, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "levee certs %s: %v\n", sub, err)
		return 1
	}
	return 0
}

type certsClient struct {
	base, token string
	http        *http.Client
}

// call sends method path and decodes the JSON answer into out; a non-2xx
// answer is its "error".
func (c certsClient) call(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s (%d)", e.Error, resp.StatusCode)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return json.Unmarshal(body, out)
}

func (c certsClient) list(ctx context.Context, expiring time.Duration, asJSON bool, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, certsTimeout)
	defer cancel()
	path := "/api/certs"
	if expiring > 0 {
		path += "?expiring=" + url.QueryEscape(expiring.String())
	}
	var got struct{ Certs []acme.CertInfo }
	if err := c.call(ctx, http.MethodGet, path, &got); err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(w).Encode(got.Certs)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tISSUER\tEXPIRES\tNEXT RENEWAL\tLAST ERROR")
	for _, ci := range got.Certs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ci.Name, ci.Issuer, day(ci.NotAfter), day(ci.NextRenewal), oneLine(ci.LastError))
	}
	return tw.Flush()
}

func (c certsClient) show(ctx context.Context, name string, asJSON bool, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, certsTimeout)
	defer cancel()
	var ci acme.CertInfo
	if err := c.call(ctx, http.MethodGet, "/api/certs/"+url.PathEscape(name), &ci); err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(w).Encode(ci)
	}
	fmt.Fprintf(w, "name:          %s\nissuer:        %s\nnot before:    %s\nexpires:       %s\nnext renewal:  %s\nlast error:    %s\n",
		ci.Name, ci.Issuer, day(ci.NotBefore), day(ci.NotAfter), day(ci.NextRenewal), oneLine(ci.LastError))
	return nil
}

func (c certsClient) renew(ctx context.Context, name string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, certsRenewTimeout)
	defer cancel()
	var ok struct{ OK bool }
	if err := c.call(ctx, http.MethodPost, "/api/certs/"+url.PathEscape(name)+"/renew", &ok); err != nil {
		return err
	}
	fmt.Fprintf(w, "renewed %s\n", name)
	return nil
}

func day(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func oneLine(s string) string {
	if s == "" {
		return "-"
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// liveCerts is the admin API's view of the ACME certificates.
type liveCerts struct {
	mgr *acme.Manager
	st  *acme.Storage
}

func (l liveCerts) List(ctx context.Context, limit int) ([]acme.CertInfo, error) {
	return acme.Certs(ctx, l.st, limit)
}

func (l liveCerts) Show(ctx context.Context, name string) (acme.CertInfo, error) {
	return acme.Cert(ctx, l.st, name)
}

func (l liveCerts) Renew(ctx context.Context, name string) error { return l.mgr.Renew(ctx, name) }
