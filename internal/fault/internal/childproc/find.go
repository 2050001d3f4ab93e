package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/fault"
	"github.com/gpuchaos/gpuchaos/internal/node/procfind"
)

// MarkEnv is the variable Start adds to the environment of a child whose
// Spec has a Mark.
const MarkEnv = "GPUCHAOS_CHILD_OF"

// Found is what a search for marked children looked at, so that a
// recovery that found none can say what that rests on.
type Found struct {
	// Procs are the live processes carrying the mark.
	Procs []procfind.Proc
	// Searched is how many processes' environments were read.
	Searched int
}

// Find lists the live processes whose environment carries MarkEnv=mark,
// looking at every process under /proc. A process whose environment it
// may not read (a sandbox hides its init even from root) cannot be a
// child started from path when its command line, which anyone may read,
// does not start with path; one whose command line does either makes
// Find fail with fault.ErrUnproven, naming it: a child of ours may hide
// there.
func Find(mark, path string) (Found, error) {
	var out Found
	if mark == "" {
		return out, errors.New("find children: empty mark")
	}
	want := []byte(MarkEnv + "=" + mark)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out, fmt.Errorf("find children of %s: %w: %w", mark, fault.ErrUnproven, err)
	}
	var hidden []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() {
			// Pid 1 is its namespace's init, started before any injector
			// could start it, and never a child of ours.
			continue
		}
		p, carries, err := marked(pid, want, path)
		switch {
		case errors.Is(err, errHidden):
			hidden = append(hidden, fmt.Sprintf("pid %d", pid))
		case err != nil:
			// Exited while looked at: nothing of it is left to find.
		case carries:
			out.Procs = append(out.Procs, p)
		}
		if err == nil || errors.Is(err, errHidden) {
			out.Searched++
		}
	}
	if len(hidden) > 0 {
		more := ""
		if len(hidden) > 3 {
			more = fmt.Sprintf(" and %d more", len(hidden)-3)
			hidden = hidden[:3]
		}
		return out, fmt.Errorf("find children of %s: cannot read the environment of %s%s, whose command line is %s's or unreadable too: %w",
			mark, strings.Join(hidden, ", "), more, path, fault.ErrUnproven)
	}
	return out, nil
}

// errHidden marks a process whose environment cannot be read and that
// may be a child of ours.
var errHidden = errors.New("environment unreadable")

// marked reads one process's identity and environment, and reports
// whether it is live and carries want. The identity is read again after
// the environment, so a pid reused in between is not taken for the
// process that was read; any error but errHidden means it is gone.
func marked(pid int, want []byte, path string) (procfind.Proc, bool, error) {
	p, err := procfind.Identify(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return p, false, err
	}
	if err != nil {
		return p, false, errHidden // its stat cannot be read: it may be ours
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return p, false, err
		}
		cmd, cerr := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if errors.Is(cerr, fs.ErrNotExist) || errors.Is(cerr, syscall.ESRCH) {
			return p, false, cerr
		}
		if cerr != nil {
			return p, false, errHidden // neither can be read: it may be ours
		}
		if argv0, _, _ := bytes.Cut(cmd, []byte{0}); string(argv0) != path {
			return p, false, nil
		}
		return p, false, errHidden
	}
	if alive, err := p.Alive(); err != nil || !alive {
		return p, false, os.ErrNotExist
	}
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if bytes.Equal(kv, want) {
			return p, true, nil
		}
	}
	return p, false, nil
}

// StopMarked stops every live process Find finds for mark, as Stop does
// (SIGTERM to its group, SIGKILL after grace), and returns what the search
// looked at. It fails, having stopped what it found, when the search could
// not look everywhere (fault.ErrUnproven) or a stop failed.
func (g *Group) StopMarked(ctx context.Context, mark, path string, grace time.Duration, sent func(procfind.Proc, syscall.Signal)) (Found, error) {
	found, ferr := Find(mark, path)
	var errs []error
	for _, p := range found.Procs {
		var s func(syscall.Signal)
		if sent != nil {
			s = func(sig syscall.Signal) { sent(p, sig) }
		}
		if err := g.Stop(ctx, p, grace, s); err != nil {
			errs = append(errs, err)
		}
	}
	return found, errors.Join(append(errs, ferr)...)
}

// String says in a few words what a search rests on, for a recovery's
// proof: how many processes it read, and that the ones it found were
// stopped (StopMarked returns only once they are gone).
func (f Found) String() string {
	if len(f.Procs) == 0 {
		return fmt.Sprintf("no marked child (searched %d processes)", f.Searched)
	}
	return fmt.Sprintf("%d marked children stopped (searched %d processes)", len(f.Procs), f.Searched)
}
