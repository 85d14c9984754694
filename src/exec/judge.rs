//! What to do after a failed attempt: a pure decision over the failure's class and where the
//! attempt stands, so the attempt loop stays short and every case is a row of a table.

use std::time::Duration;

use super::OutcomeClass;

/// Where a failed attempt stands when it is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct At {
    /// The failure was the credential's (a 429, 401 or 403 on a reserved key), and the channel
    /// has another key this request has not spent.
    pub other_credential: bool,
    /// In-channel retries the channel still allows for this request.
    pub retries_left: u32,
    /// The channel is the last candidate of the model's plan.
    pub last_candidate: bool,
    /// This failure opened (or re-opened) the channel's circuit.
    pub circuit_opened: bool,
    /// The wait before a retry (backoff, or the upstream's capped Retry-After).
    pub wait: Duration,
    /// Until the request's deadline.
    pub time_left: Duration,
}

/// The next move of the attempt loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Another key of the same channel, at once, before failing over.
    NextCredential,
    /// The same channel again after this wait.
    Retry(Duration),
    /// The plan's next channel (or, with none left, the model's end).
    NextChannel,
    /// The request ends with this failure: the client's own mistake, or a loop.
    Stop,
}

pub fn judge(class: OutcomeClass, at: &At) -> Next {
    if at.other_credential {
        return Next::NextCredential;
    }
    if !class.fails_over() {
        return Next::Stop;
    }
    // A rate-limited channel is left at once while another is available; the last one may
    // wait out its Retry-After (capped, inside the deadline) if it allows retries.
    let may_retry = if class == OutcomeClass::RateLimit {
        at.last_candidate
    } else {
        class.retries_same_channel()
    };
    if may_retry && at.retries_left > 0 && !at.circuit_opened && at.wait < at.time_left {
        return Next::Retry(at.wait);
    }
    Next::NextChannel
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutcomeClass::*;

    const WAIT: Duration = Duration::from_millis(100);

    fn at(retries_left: u32, last_candidate: bool, deadline_fits: bool) -> At {
        At {
            other_credential: false,
            retries_left,
            last_candidate,
            circuit_opened: false,
            wait: WAIT,
            time_left: if deadline_fits { WAIT * 10 } else { WAIT / 2 },
        }
    }

    /// Every class × retries left × last candidate × whether a retry's wait fits the deadline.
    /// Columns, in order: (retries 0, not last, fits), (0, not last, passes), (0, last, fits),
    /// (0, last, passes), then the same four with one retry left.
    /// `C` next channel, `R` retry, `S` stop.
    #[test]
    fn every_class_against_retries_position_and_deadline() {
        let table: [(OutcomeClass, &str); 10] = [
            (ConnectionError, "CCCC RCRC"),
            (Timeout, "CCCC RCRC"),
            (ServerError, "CCCC RCRC"),
            (RateLimit, "CCCC CCRC"),
            (Misrouted, "CCCC CCCC"),
            (AuthError, "CCCC CCCC"),
            (TranslationError, "CCCC CCCC"),
            (ClientError, "SSSS SSSS"),
            (Blocked, "SSSS SSSS"),
            (ContextWindow, "SSSS SSSS"),
        ];
        for (class, row) in table {
            let expected: Vec<char> = row.chars().filter(|c| !c.is_whitespace()).collect();
            let mut col = 0;
            for retries in [0, 1] {
                for last in [false, true] {
                    for fits in [true, false] {
                        let got = match judge(class, &at(retries, last, fits)) {
                            Next::NextChannel => 'C',
                            Next::Retry(w) => {
                                assert_eq!(w, WAIT);
                                'R'
                            }
                            Next::Stop => 'S',
                            Next::NextCredential => 'K',
                        };
                        assert_eq!(
                            got, expected[col],
                            "{class:?}: retries {retries}, last {last}, deadline fits {fits}"
                        );
                        col += 1;
                    }
                }
            }
        }
    }

    #[test]
    fn a_spent_key_tries_the_next_key_and_an_opened_circuit_ends_the_retries() {
        for class in [RateLimit, AuthError] {
            let mut a = at(1, true, true);
            a.other_credential = true;
            assert_eq!(judge(class, &a), Next::NextCredential);
        }
        let mut a = at(3, true, true);
        a.circuit_opened = true;
        assert_eq!(judge(ServerError, &a), Next::NextChannel);
    }

    #[test]
    fn only_the_listed_classes_fail_over() {
        let listed: Vec<OutcomeClass> = OutcomeClass::FAIL_OVER.to_vec();
        for class in OutcomeClass::ALL {
            assert_eq!(class.fails_over(), listed.contains(&class), "{class:?}");
        }
    }
}
