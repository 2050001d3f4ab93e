package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// NamePrefix starts the name of every group this package creates, so that
// a group of ours is never mistaken for the job's and never nested.
const NamePrefix = "gpuchaos-"

// File is one limit written into our group: a file name of the
// controller (cpu.cfs_quota_us, io.max, …) and its content.
type File struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Move records where one thread (v1) or process (v2) lived before it was
// confined.
type Move struct {
	ID   int    `json:"id"`
	From string `json:"from"`
}

// Confinement is one process held in a group of ours, as planned and
// recorded before anything changed. Its fields are plain data so that a
// record written by one process can be released by another.
type Confinement struct {
	Hierarchy
	// Proc is the confined process.
	Proc procfind.Proc `json:"proc"`
	// Home is the process's own group when planned; threads that Moves
	// does not know (born later) go back there.
	Home string `json:"home"`
	// Dir is our group, relative to the mount.
	Dir string `json:"dir"`
	// Files are the limits written into Dir before anything moves in.
	Files []File `json:"files"`
	// Moves are the threads (v1) or the process (v2) as planned.
	Moves []Move `json:"moves"`
}

// Plan works out how to confine pid in a group named name (which must
// start with NamePrefix) under the limits files, without changing
// anything. The caller records the plan, then applies it.
func Plan(h Hierarchy, p procfind.Proc, name string, files []File) (*Confinement, error) {
	c := &Confinement{Hierarchy: h, Proc: p, Files: files}
	home, err := GroupOf(h, p.PID, p.PID)
	if err != nil {
		return nil, fmt.Errorf("plan %s group of pid %d: %w", h.Controller, p.PID, err)
	}
	if strings.HasPrefix(path.Base(home), NamePrefix) {
		return nil, fmt.Errorf("plan %s group of pid %d: already confined in %s by another fault", h.Controller, p.PID, home)
	}
	c.Home = home
	switch h.Version {
	case V1:
		c.Dir = path.Join(home, name)
		tids, err := procfind.Threads(p.PID)
		if err != nil {
			return nil, fmt.Errorf("plan %s group of pid %d: threads: %w", h.Controller, p.PID, err)
		}
		for _, tid := range tids {
			g, err := GroupOf(h, p.PID, tid)
			if errors.Is(err, os.ErrNotExist) {
				continue // the thread ended
			}
			if err != nil {
				return nil, fmt.Errorf("plan %s group of pid %d: %w", h.Controller, p.PID, err)
			}
			c.Moves = append(c.Moves, Move{ID: tid, From: g})
		}
	case V2:
		// Our group goes under the nearest ancestor that hands the
		// controller to its children: in a container the process's own
		// parent often does not (its processes would break the
		// no-internal-process rule if it did), while an ancestor does.
		// Enabling a controller ourselves would change every sibling's
		// group, so we never do.
		parent, err := delegating(h, home)
		if err != nil {
			return nil, fmt.Errorf("plan %s group of pid %d: %w", h.Controller, p.PID, err)
		}
		c.Dir = path.Join(parent, name)
		c.Moves = []Move{{ID: p.PID, From: home}}
	default:
		return nil, fmt.Errorf("plan: cgroup version %d", h.Version)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("plan %s group of pid %d: %w", h.Controller, p.PID, err)
	}
	return c, nil
}

// delegating returns the nearest proper ancestor of group whose
// cgroup.subtree_control enables h's controller.
func delegating(h Hierarchy, group string) (string, error) {
	first := path.Dir(group)
	for dir := first; ; dir = path.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(h.Mount, dir, "cgroup.subtree_control"))
		if err != nil {
			return "", err
		}
		if slices.Contains(strings.Fields(string(b)), h.Controller) {
			return dir, nil
		}
		if dir == "/" {
			return "", fmt.Errorf("the %s controller is not enabled for the children of %s nor of any group above it (cgroup.subtree_control)", h.Controller, first)
		}
	}
}

// Validate checks that a record could only have been written by Plan:
// every group lies inside the mount, ours is named as ours, the limit
// files are the controller's. Release relies on it before acting on a
// record read from disk.
func (c *Confinement) Validate() error {
	if c.Version != V1 && c.Version != V2 {
		return fmt.Errorf("cgroup version %d", c.Version)
	}
	if !filepath.IsAbs(c.Mount) || filepath.Clean(c.Mount) != c.Mount || c.Mount == "/" {
		return fmt.Errorf("mount %q is not a clean absolute path", c.Mount)
	}
	if c.Controller == "" || strings.ContainsAny(c.Controller, "/.") {
		return fmt.Errorf("controller %q", c.Controller)
	}
	if !c.Proc.Valid() {
		return fmt.Errorf("process %+v", c.Proc)
	}
	for _, g := range append([]string{c.Home, c.Dir}, movesFrom(c.Moves)...) {
		if !strings.HasPrefix(g, "/") || path.Clean(g) != g {
			return fmt.Errorf("group %q is not a clean absolute path", g)
		}
	}
	if !strings.HasPrefix(path.Base(c.Dir), NamePrefix) {
		return fmt.Errorf("group %q is not one of ours", c.Dir)
	}
	for _, f := range c.Files {
		if !strings.HasPrefix(f.Name, c.Controller+".") || strings.ContainsAny(f.Name, "/") || strings.ContainsAny(f.Value, "\n\x00") {
			return fmt.Errorf("limit file %q = %q", f.Name, f.Value)
		}
	}
	for _, m := range c.Moves {
		if m.ID <= 1 {
			return fmt.Errorf("thread id %d", m.ID)
		}
	}
	return nil
}

func movesFrom(ms []Move) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.From
	}
	return out
}

// membersFile is where ids are written to move them: threads on v1,
// whole processes on v2.
func (c *Confinement) membersFile() string {
	if c.Version == V1 {
		return "tasks"
	}
	return "cgroup.procs"
}

func (c *Confinement) abs(group string) string { return filepath.Join(c.Mount, group) }

// Apply creates our group, writes the limits and moves the process in.
// It is safe to repeat. Threads the process starts while it moves are
// picked up by a few passes; a thread that ends meanwhile is skipped.
func (c *Confinement) Apply() error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("confine: %w", err)
	}
	dir := c.abs(c.Dir)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("confine pid %d: create %s: %w", c.Proc.PID, dir, err)
	}
	for _, f := range c.Files {
		if err := WriteFile(filepath.Join(dir, f.Name), f.Value); err != nil {
			return fmt.Errorf("confine pid %d: %w", c.Proc.PID, err)
		}
	}
	// The identity is checked before the first move; once moved, a thread
	// is in a group of ours, and Release moves whatever it finds there.
	if ok, err := c.Proc.Alive(); err != nil || !ok {
		if err == nil {
			err = os.ErrNotExist
		}
		return fmt.Errorf("confine pid %d: %w", c.Proc.PID, err)
	}
	if c.Version == V2 {
		err := WriteFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(c.Proc.PID))
		if err != nil {
			return fmt.Errorf("confine pid %d: %w", c.Proc.PID, err)
		}
		return nil
	}
	for pass := 0; pass < 5; pass++ {
		tids, err := procfind.Threads(c.Proc.PID)
		if err != nil {
			return fmt.Errorf("confine pid %d: threads: %w", c.Proc.PID, err)
		}
		moved := 0
		for _, tid := range tids {
			g, err := GroupOf(c.Hierarchy, c.Proc.PID, tid)
			if err != nil || g == c.Dir {
				continue
			}
			if err := WriteFile(filepath.Join(dir, "tasks"), strconv.Itoa(tid)); err != nil {
				if errors.Is(err, syscall.ESRCH) {
					continue
				}
				return fmt.Errorf("confine pid %d: %w", c.Proc.PID, err)
			}
			moved++
		}
		if moved == 0 {
			return nil
		}
	}
	return nil
}

// Release lifts our group's CPU quota, then moves every member of our
// group back where it came from (the recorded group of that thread, else
// Home) and removes our group. It succeeds when the group is already gone
// and is safe to repeat.
func (c *Confinement) Release() error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	dir := c.abs(c.Dir)
	if err := c.lift(); err != nil {
		return fmt.Errorf("release %s: %w", dir, err)
	}
	from := map[int]string{}
	for _, m := range c.Moves {
		from[m.ID] = m.From
	}
	var lastErr error
	for attempt := 0; attempt < 50; attempt++ {
		ids, err := readIDs(filepath.Join(dir, c.membersFile()))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("release %s: %w", dir, err)
		}
		for _, id := range ids {
			dest, ok := from[id]
			if !ok {
				dest = c.Home
			}
			err := WriteFile(filepath.Join(c.abs(dest), c.membersFile()), strconv.Itoa(id))
			if errors.Is(err, os.ErrNotExist) && dest != c.Home {
				// Its own group went away: home is the next best place.
				err = WriteFile(filepath.Join(c.abs(c.Home), c.membersFile()), strconv.Itoa(id))
			}
			if err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("release %s: move %d back to %s: %w", dir, id, dest, err)
			}
		}
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		// EBUSY: a thread was born in our group since the read, or an
		// exiting one is still listed; look again.
		lastErr = err
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("release: remove %s: %w", dir, lastErr)
}

// unlimited holds, for each limit file whose limit can leave a thread
// queued but unable to run, the value that lifts the limit.
//
// A thread that used up its group's CFS quota stays queued on its CPU
// until the next period refills the quota, and that CPU, having nothing
// else to run, goes idle. Moving the thread to another group re-queues it
// there but does not ask the CPU to reschedule (the kernel does that only
// for the thread running at the time of the move), so an idle CPU goes on
// sleeping with the thread runnable on it until some interrupt wakes it:
// on a quiet machine the rank stood still for over half a second after
// recovery. Lifting the quota first unthrottles through the kernel's own
// path, which wakes an idle CPU that has work again; only then do the
// threads move.
var unlimited = map[string]string{
	"cpu.cfs_quota_us": "-1",  // v1
	"cpu.max":          "max", // v2: the period stays
}

// lift writes the unlimited value of each of our limit files that has
// one. A group already gone has nothing to lift.
func (c *Confinement) lift() error {
	for _, f := range c.Files {
		v, ok := unlimited[f.Name]
		if !ok {
			continue
		}
		err := WriteFile(filepath.Join(c.abs(c.Dir), f.Name), v)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lift the limit: %w", err)
		}
	}
	return nil
}

// Exists reports whether our group exists.
func (c *Confinement) Exists() bool {
	_, err := os.Stat(c.abs(c.Dir))
	return err == nil
}

func readIDs(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, f := range strings.Fields(string(b)) {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not an id", file, f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// WriteFile writes one value to a cgroup file in a single write, as the
// kernel expects, without creating or truncating anything.
func WriteFile(file, value string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, file, err)
	}
	return nil
}
