package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// runEtcdMember lists or removes members of the etcd cluster the HA store
// runs on: the jobmanagers' embedded members, or an external cluster.
// Removing a dead member is the first step of replacing it: its
// replacement then starts with -etcd-join on an empty data directory.
func runEtcdMember(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("etcd-member", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		client  etcdClientFlags
		timeout time.Duration
	)
	client.register(fs, "comma-separated client URLs of running members (an embedded member's -etcd-client-listen)")
	fs.DurationVar(&timeout, "timeout", 10*time.Second, "how long the command may take")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage:\n"+
			"  jobplane etcd-member list --etcd-endpoints URL,...          the cluster's members\n"+
			"  jobplane etcd-member remove NAME --etcd-endpoints URL,...   remove a member (by name or hex ID)\n\n"+
			"Lists or removes members of the etcd cluster the HA store runs on. A dead\n"+
			"member is removed before its replacement joins (-etcd-join, empty -data-dir).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// Flags may come before or after the action and its argument.
	var positional []string
	for rest := args; ; {
		if code, ok := parseFlagsOnly(fs, rest); !ok {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "etcd-member: %s\n", msg)
		fs.Usage()
		return exitUsage
	}
	switch {
	case len(positional) == 0:
		return usage("name an action: list or remove")
	case positional[0] == "list" && len(positional) != 1:
		return usage("list takes no arguments")
	case positional[0] == "remove" && len(positional) != 2:
		return usage("remove takes the member's name")
	case positional[0] != "list" && positional[0] != "remove":
		return usage(fmt.Sprintf("unknown action %q", positional[0]))
	case client.endpoints == "":
		return usage("-etcd-endpoints is required")
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := client.config(log)
	if err != nil {
		return usage(err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := etcdmember.NewClient(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "etcd-member: %v\n", err)
		return exitError
	}
	defer c.Close()
	list, err := c.MemberList(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "etcd-member: list members at %v: %v\n", cfg.Endpoints, err)
		return exitError
	}
	if positional[0] == "list" {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tPEER URLS\tCLIENT URLS")
		for _, m := range list.Members {
			name, status := m.Name, "started"
			if name == "" {
				name, status = "-", "unstarted"
			}
			if m.IsLearner {
				status += ",learner"
			}
			fmt.Fprintf(tw, "%x\t%s\t%s\t%s\t%s\n", m.ID, name, status, strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","))
		}
		tw.Flush()
		return exitOK
	}
	target := positional[1]
	var id uint64
	for _, m := range list.Members {
		if m.Name == target || fmt.Sprintf("%x", m.ID) == strings.ToLower(target) {
			id = m.ID
		}
	}
	if id == 0 {
		if n, err := strconv.ParseUint(target, 16, 64); err == nil && n != 0 {
			fmt.Fprintf(stderr, "etcd-member: no member %q (nor with ID %x) in the cluster\n", target, n)
		} else {
			fmt.Fprintf(stderr, "etcd-member: no member %q in the cluster\n", target)
		}
		return exitError
	}
	if _, err := c.MemberRemove(ctx, id); err != nil {
		fmt.Fprintf(stderr, "etcd-member: remove %s (%x): %v\n", target, id, err)
		return exitError
	}
	fmt.Fprintf(stdout, "removed member %s (%x)\n", target, id)
	return exitOK
}

// parseFlagsOnly parses args into fs, leaving positional arguments in
// fs.Args(); ok is false when the caller must return code at once (help
// or bad usage).
func parseFlagsOnly(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK, false
		}
		return exitUsage, false
	}
	return exitOK, true
}
