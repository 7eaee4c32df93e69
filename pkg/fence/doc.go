// Package fence is the effectfence engine: it admits at most one execution of each intent and
// tells every other attempt what happened.
//
// An attempt is a Request naming an intent (a stable id of one logical action), the tool and
// arguments it would run, an optional contention domain, and the read set its decision was
// based on. Prepare passes the attempt through three gates, in this order:
//
//  1. intent gate: a done intent replays its certificate (if the fingerprint of {tool, args}
//     matches, or, with Request.EmptyArgsAlike, that of its other empty form; otherwise
//     IntentConflictError), a live claim refuses with InFlightError, a failed or unknown
//     outcome refuses with PriorFailureError until an operator clears it;
//  2. read-set check: every {domain, seq} the caller read must still be current, otherwise
//     StaleReadSetError;
//  3. domain reservation: the next sequence number of the target domain is taken.
//
// The gates run inside one Store transaction, so two attempts can never both pass them, whether
// they run in one process or in many processes sharing a durable store. Admission returns either
// a Ticket (run the effect now, then Commit, Abort or Release it) or a replayed Cert (do not run
// the effect; use the recorded result). Every error means: do not run the effect.
//
// What the fence cannot do: it cannot know whether an effect that was admitted and never
// reported actually happened. Such intents become failed or unknown and stay fenced until an
// operator reconciles them with the real system and calls Clear. The fence trades a stall for
// a double execution, never the other way round.
package fence
