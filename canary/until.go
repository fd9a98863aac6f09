package canary

import "time"

// Until is the first instant after the reading's own at which a reading of
// the same inputs may say something else; the zero time when only a change
// of the inputs can. Two of a reading's answers depend on the clock:
//
//   - A namespace's maintenance windows block it when none of them opens
//     within a year (windowsMeet). Windows open on the minute, so the
//     answer is read again as each minute starts; one whose duration ends
//     it within a minute (90s) can be read up to a minute late.
//   - A migration given its target again after it ended starts a new
//     status retried at the reading's time (freshStatus), and that status
//     counts only the rollbacks on record dated after it
//     (migrationOnRecord.current). A rollback record dated ahead of the
//     reading, by a replica whose clock runs ahead, counts until its date
//     comes. Once the status is written, its RetriedAt no longer moves.
//
// A reader that keeps what it derived from a reading (the holders tally)
// reads again at this instant.
func (r *Reading) Until() time.Time {
	var until time.Time
	earliest := func(t time.Time) {
		if until.IsZero() || t.Before(until) {
			until = t
		}
	}
	if r.OptedIn && len(r.Settings.Windows) > 0 {
		earliest(r.now.Truncate(time.Minute).Add(time.Minute))
	}
	if st := r.Status; st != nil && st.RetriedAt != nil && st.RetriedAt.Equal(r.now) {
		for _, w := range r.records() {
			if rec := w.record; rec != nil && rec.Rollback && rec.At.After(r.now) {
				earliest(rec.At)
			}
		}
	}
	return until
}
