package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/jobplane/jobplane/server/hastore/etcdmember"
)

// The member that `jobplane standalone` and `jobplane jobmanager` embed by
// default (etcdmember.Config's documented defaults): its name, and the
// peer URL it records for itself, which a single member never dials. A
// snapshot restored without --etcd-peers makes this member, so the
// default server starts on the restored directory as on its own.
const (
	defaultMemberName    = "jobplane"
	defaultMemberPeerURL = "http://127.0.0.1:0"
)

// defaultRevisionBump is how far restore moves the store's revision past
// the snapshot's. Fencing epochs are etcd revisions: a TaskExecutor that
// outlived the old store may hold a token issued after the snapshot was
// taken, and must see every token of the restored store as newer. A
// billion revisions is more than any store writes between two backups.
const defaultRevisionBump = 1_000_000_000

// runBackup writes a snapshot of a jobplane store's etcd to a file.
func runBackup(args []string, stdout, stderr io.Writer) int {
	c := newCommand("backup", "Writes a consistent snapshot of the whole etcd keyspace of a jobplane store\n"+
		"(every key prefix) to --out, for `jobplane restore`. The snapshot is\n"+
		"written to --out.part, synced, checked (its sha256 and its database), and\n"+
		"only then renamed to --out, replacing an earlier file of that name; on\n"+
		"failure --out is left as it was. On success it prints the file's size, the\n"+
		"store revision it holds, its key count and its sha256.\n\n"+
		"The store is taken from exactly one of:\n"+
		"  --etcd-endpoints URL,...  a running etcd: an external cluster or the\n"+
		"                            client URLs of jobmanagers' embedded members.\n"+
		"                            The snapshot is taken from the leader among the\n"+
		"                            endpoints (else the first that answers), after a\n"+
		"                            quorum read, so it holds every write acknowledged\n"+
		"                            before the backup began. Refused if no endpoint\n"+
		"                            answers (a member without a quorum does not).\n"+
		"  --data-dir D              the embedded member's data directory of a STOPPED\n"+
		"                            (or crashed) server: standalone, jobmanager or\n"+
		"                            hastore. The member is started on D alone for\n"+
		"                            the snapshot and stopped again. Refused while a\n"+
		"                            server runs on D (it holds the directory's lock:\n"+
		"                            stop it, or use --etcd-endpoints), if D holds no\n"+
		"                            etcd data, and if D is one member of a several-\n"+
		"                            member cluster (it cannot start without the\n"+
		"                            others: use --etcd-endpoints).", stderr)
	var (
		out       string
		dataDir   string
		endpoints string
		timeout   time.Duration
	)
	c.fs.StringVar(&out, "out", "", "the snapshot file to write (required)")
	c.fs.StringVar(&dataDir, "data-dir", "", "data directory of a stopped server's embedded etcd member")
	c.fs.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated client URLs of a running etcd cluster or embedded members")
	c.fs.DurationVar(&timeout, "timeout", 5*time.Minute, "bound on the whole backup")
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	switch {
	case out == "":
		fmt.Fprintln(stderr, "backup: --out is required")
		return exitUsage
	case (dataDir == "") == (endpoints == ""):
		fmt.Fprintln(stderr, "backup: exactly one of --data-dir and --etcd-endpoints is required")
		return exitUsage
	case timeout <= 0:
		fmt.Fprintln(stderr, "backup: --timeout must be positive")
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var (
		info   snapshotInfo
		source string
		err    error
	)
	if dataDir != "" {
		source = "data directory " + dataDir
		info, err = backupDataDir(ctx, dataDir, out, log)
	} else {
		var ep string
		ep, info, err = backupEndpoints(ctx, splitList(endpoints), out)
		source = "etcd member " + ep
	}
	if err != nil {
		fmt.Fprintf(stderr, "backup: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "wrote %s from %s: %d bytes, revision %d, %d keys, sha256 %s\n",
		out, source, info.size, info.revision, info.keys, info.sha256)
	return exitOK
}

// backupDataDir snapshots the member on the stopped server's data
// directory dir into out.
func backupDataDir(ctx context.Context, dir, out string, log *slog.Logger) (snapshotInfo, error) {
	// etcdmember.Start would make a new, empty member on a directory without
	// one, and back that up.
	if _, err := os.Stat(filepath.Join(dir, "member")); err != nil {
		return snapshotInfo{}, fmt.Errorf("%s holds no etcd member data (no %s)", dir, filepath.Join(dir, "member"))
	}
	if err := checkSingleMember(dir); err != nil {
		return snapshotInfo{}, err
	}
	m, err := etcdmember.Start(ctx, etcdmember.Config{Dir: dir, Logger: log})
	if errors.Is(err, etcdmember.ErrDataDirInUse) {
		return snapshotInfo{}, fmt.Errorf("%w: --data-dir works only while the server is stopped; stop it first, or snapshot its running etcd member with --etcd-endpoints", err)
	}
	if err != nil {
		return snapshotInfo{}, err
	}
	defer m.Close()
	client, err := m.NewClient()
	if err != nil {
		return snapshotInfo{}, err
	}
	defer client.Close()
	return saveSnapshot(ctx, client, out)
}

// checkSingleMember refuses the data directory of one member of a
// several-member cluster, which cannot start without its peers. It reads
// the membership from the member's database; a database that another
// process holds is left for etcdmember.Start to report.
func checkSingleMember(dir string) error {
	db, err := bolt.Open(filepath.Join(dir, "member", "snap", "db"), 0o400, &bolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if err != nil {
		return nil
	}
	defer db.Close()
	var names []string
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("members"))
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var m struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(v, &m) == nil {
				names = append(names, m.Name)
			}
			return nil
		})
	})
	if err != nil || len(names) <= 1 {
		return nil
	}
	slices.Sort(names)
	return fmt.Errorf("%s is a member of a cluster of %d members (%s), which cannot start without the others: back the cluster up through --etcd-endpoints", dir, len(names), strings.Join(names, ", "))
}

// backupEndpoints snapshots one member of the etcd cluster at endpoints
// into out: the leader if one of them is, else the first that answers.
// It returns the member's endpoint.
func backupEndpoints(ctx context.Context, endpoints []string, out string) (string, snapshotInfo, error) {
	all, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", snapshotInfo{}, fmt.Errorf("etcd client: %w", err)
	}
	defer all.Close()
	chosen := ""
	var failures []error
	for _, ep := range endpoints {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := all.Status(sctx, ep)
		cancel()
		if err != nil {
			failures = append(failures, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		if chosen == "" || st.Leader == st.Header.GetMemberId() {
			chosen = ep
		}
		if st.Leader == st.Header.GetMemberId() {
			break
		}
	}
	if chosen == "" {
		return "", snapshotInfo{}, fmt.Errorf("no etcd endpoint answers (a member that lost its quorum does not): %w", errors.Join(failures...))
	}
	// A snapshot is of the one member it is asked of.
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{chosen}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", snapshotInfo{}, fmt.Errorf("etcd client: %w", err)
	}
	defer client.Close()
	info, err := saveSnapshot(ctx, client, out)
	return chosen, info, err
}

// quorumTimeout bounds the quorum read before a snapshot: it takes
// milliseconds, or an election's few seconds, on a member with a quorum.
const quorumTimeout = 30 * time.Second

// saveSnapshot writes a snapshot of client's member to out through
// out.part, and checks it before it takes the name out.
func saveSnapshot(ctx context.Context, client *clientv3.Client, out string) (info snapshotInfo, err error) {
	// A quorum read first: the member answers it only once it has applied
	// every write committed before, so the snapshot holds them all.
	qctx, cancel := context.WithTimeout(ctx, quorumTimeout)
	_, err = client.Get(qctx, "jobplane-backup", clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return info, fmt.Errorf("quorum read before the snapshot (has the member a quorum?): %w", err)
	}
	resp, err := client.SnapshotWithVersion(ctx)
	if err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	defer resp.Snapshot.Close()
	part := out + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return info, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(part)
		}
	}()
	if _, err := io.Copy(f, resp.Snapshot); err != nil {
		return info, fmt.Errorf("snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		return info, err
	}
	if err := f.Close(); err != nil {
		return info, err
	}
	if info, err = checkSnapshot(part); err != nil {
		return info, fmt.Errorf("the snapshot received does not check out: %w", err)
	}
	if err := os.Rename(part, out); err != nil {
		return info, err
	}
	return info, syncDir(filepath.Dir(out))
}

// snapshotInfo describes a checked snapshot file.
type snapshotInfo struct {
	size     int64
	revision int64
	keys     int
	sha256   string // of the whole file, as sha256sum prints it
}

// checkSnapshot checks the snapshot file at path: the sha256 of its
// database that etcd appends to a snapshot, then the database itself.
func checkSnapshot(path string) (snapshotInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return snapshotInfo{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return snapshotInfo{}, err
	}
	size := st.Size()
	// etcd pads the database to a multiple of 512 bytes and appends the
	// digest (etcdutl's check): a file of another size is truncated, or
	// a database copied out of a data directory rather than a snapshot.
	if size < sha256.Size || size%512 != sha256.Size {
		return snapshotInfo{}, fmt.Errorf("%s is not an etcd snapshot (%d bytes: no checksum at its end; truncated, or not written by jobplane backup or etcdctl snapshot save)", path, size)
	}
	body, file := sha256.New(), sha256.New()
	if _, err := io.Copy(io.MultiWriter(body, file), io.LimitReader(f, size-sha256.Size)); err != nil {
		return snapshotInfo{}, err
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return snapshotInfo{}, err
	}
	file.Write(want)
	if !bytes.Equal(body.Sum(nil), want) {
		return snapshotInfo{}, fmt.Errorf("%s is corrupted: the sha256 of its contents does not match the checksum at its end", path)
	}
	status, err := statusOf(path)
	if err != nil {
		return snapshotInfo{}, fmt.Errorf("%s: database check failed: %w", path, err)
	}
	return snapshotInfo{size: size, revision: status.Revision, keys: status.TotalKey, sha256: hex.EncodeToString(file.Sum(nil))}, nil
}

// statusOf reads a snapshot's database (and checks its pages) through
// etcdutl, which panics on some malformed pages rather than failing.
func statusOf(path string) (st snapshot.Status, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed database: %v", r)
		}
	}()
	return snapshot.NewV3(zap.NewNop()).Status(path)
}

// runRestore restores a snapshot into a new data directory.
func runRestore(args []string, stdout, stderr io.Writer) int {
	c := newCommand("restore", "Restores a snapshot written by `jobplane backup` (or `etcdctl snapshot save`)\n"+
		"into --data-dir, a NEW data directory for one etcd member; a server then\n"+
		"starts on it with the jobs, plans and results the snapshot holds, and\n"+
		"recovers the jobs that were running. Run it on a stopped cluster.\n\n"+
		"Without --etcd-peers it makes the single member that `jobplane standalone\n"+
		"--data-dir D` and `jobplane jobmanager --data-dir D` embed by default. For a\n"+
		"new cluster of several embedded members, run it on each machine with that\n"+
		"machine's --etcd-name and the same --etcd-peers (and the same snapshot\n"+
		"file), then start each jobmanager with those same values.\n\n"+
		"Refused (and nothing written) if the snapshot's sha256 does not match the\n"+
		"checksum at its end or its database is damaged, if --data-dir exists and\n"+
		"is not empty, or if --etcd-name is not in --etcd-peers. The directory\n"+
		"appears only once complete: it is restored beside it and renamed.\n\n"+
		"The store's revision is moved --bump-revision past the snapshot's and the\n"+
		"history before it is marked compacted, so every fencing token of the\n"+
		"restored store is newer than any the old store issued.", stderr)
	var (
		from    string
		dataDir string
		name    string
		peers   string
		bump    uint64
	)
	c.fs.StringVar(&from, "from", "", "the snapshot file (required)")
	c.fs.StringVar(&dataDir, "data-dir", "", "the new data directory, absent or empty (required)")
	c.fs.StringVar(&name, "etcd-name", defaultMemberName, "this member's name in --etcd-peers")
	c.fs.StringVar(&peers, "etcd-peers", "", "the new cluster's members, name=peerURL,...; default: the single embedded member ("+defaultMemberName+"="+defaultMemberPeerURL+")")
	c.fs.Uint64Var(&bump, "bump-revision", defaultRevisionBump, "how far to move the store's revision past the snapshot's; 0 keeps it (only if no TaskExecutor or client of the old store remains)")
	log, code, ok := c.parse(args, stderr)
	if !ok {
		return code
	}
	switch {
	case from == "":
		fmt.Fprintln(stderr, "restore: --from is required")
		return exitUsage
	case dataDir == "":
		fmt.Fprintln(stderr, "restore: --data-dir is required")
		return exitUsage
	case name == "":
		fmt.Fprintln(stderr, "restore: --etcd-name must not be empty")
		return exitUsage
	}
	if peers == "" {
		peers = name + "=" + defaultMemberPeerURL
	}
	cluster, err := types.NewURLsMap(peers)
	if err != nil {
		fmt.Fprintf(stderr, "restore: --etcd-peers %q: %v\n", peers, err)
		return exitUsage
	}
	if _, ok := cluster[name]; !ok {
		fmt.Fprintf(stderr, "restore: --etcd-name %q is not one of --etcd-peers %q\n", name, peers)
		return exitUsage
	}
	info, err := restoreSnapshot(from, dataDir, name, cluster, bump, log)
	if err != nil {
		fmt.Fprintf(stderr, "restore: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "restored %s (revision %d, %d keys, sha256 %s) into %s as member %s of %s; store revision now %d\n",
		from, info.revision, info.keys, info.sha256, dataDir, name, cluster.String(), info.revision+int64(bump))
	return exitOK
}

// restoreSnapshot checks the snapshot at from and restores it into the
// new directory dir for member name of cluster.
func restoreSnapshot(from, dir, name string, cluster types.URLsMap, bump uint64, log *slog.Logger) (snapshotInfo, error) {
	info, err := checkSnapshot(from)
	if err != nil {
		return info, err
	}
	if err := checkNewDir(dir); err != nil {
		return info, err
	}
	// Restore beside dir, on its file system, and rename: a restore cut
	// short leaves no half-made directory under the name a server opens.
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return info, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restore-")
	if err != nil {
		return info, err
	}
	defer os.RemoveAll(tmp)
	staged := filepath.Join(tmp, "data")
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:   from,
		Name:           name,
		OutputDataDir:  staged,
		PeerURLs:       cluster[name].StringSlice(),
		InitialCluster: cluster.String(),
		// Every member restores the same file, so a token made of the
		// snapshot's hash is one cluster ID for all of them, and none the
		// old cluster's: the old members cannot mix with the new ones.
		InitialClusterToken: "jobplane-restore-" + info.sha256[:16],
		RevisionBump:        bump,
		MarkCompacted:       bump > 0,
	})
	if err != nil {
		return info, fmt.Errorf("restore %s: %w", from, err)
	}
	if err := os.Chmod(staged, 0o700); err != nil {
		return info, err
	}
	// rename(2) replaces an empty directory but never a non-empty one, so a
	// directory filled since the check above is kept. (os.Rename refuses
	// any existing directory.)
	if err := syscall.Rename(staged, dir); err != nil {
		return info, fmt.Errorf("move the restored member into place: %w", &os.LinkError{Op: "rename", Old: staged, New: dir, Err: err})
	}
	log.Debug("restored", "from", from, "data_dir", dir, "member", name, "cluster", cluster.String())
	return info, syncDir(parent)
}

// checkNewDir accepts a directory that is absent or empty.
func checkNewDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("--data-dir %s is not a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("--data-dir %s is not empty: restore writes only into a new, empty directory (move the old one away first)", dir)
	}
	return nil
}

// syncDir makes a rename or creation in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var items []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}
