package procfind

import (
	"errors"
	"fmt"
	"os"
)

// Gone reports whether p has ended, with what shows it, for a recovery
// that may call its target gone only with the proof in hand: /proc/PID
// absent, the pid now another process's (another start time), or the
// process a zombie with no thread left running. Unlike Alive it does not
// take a zombie leader for an ended process: a leader whose main thread
// called pthread_exit shows Z while its other threads run on, holding
// whatever was done to the process. An error means /proc could not tell.
func (p Proc) Gone() (proof string, gone bool, err error) {
	st, err := ReadStat(p.PID)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("pid %d (start tick %d) has exited: /proc/%d is absent", p.PID, p.StartTicks, p.PID), true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("pid %d: %w", p.PID, err)
	}
	if st.StartTicks != p.StartTicks {
		return fmt.Sprintf("pid %d (start tick %d) has exited: the pid now names a process started at tick %d", p.PID, p.StartTicks, st.StartTicks), true, nil
	}
	if st.State != 'Z' && st.State != 'X' {
		return "", false, nil
	}
	tids, err := Threads(p.PID)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("pid %d (start tick %d) has exited: reaped while looked at", p.PID, p.StartTicks), true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("pid %d: threads: %w", p.PID, err)
	}
	for _, tid := range tids {
		if tid == p.PID {
			continue
		}
		ts, err := ReadThreadStat(p.PID, tid)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended between the listing and the read
		}
		if err != nil {
			return "", false, fmt.Errorf("pid %d: thread %d: %w", p.PID, tid, err)
		}
		if ts.State != 'Z' && ts.State != 'X' {
			return "", false, nil
		}
	}
	return fmt.Sprintf("pid %d (start tick %d) has exited: a zombie with no thread running", p.PID, p.StartTicks), true, nil
}
