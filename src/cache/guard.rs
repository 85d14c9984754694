//! What a semantic hit needs beyond the cosine: the two questions ask with the same words.
//! Embeddings score a near-miss as high as a paraphrase (MiniLM puts "convert Celsius to
//! Fahrenheit" and "…Fahrenheit to Celsius" at 0.998), so the cosine only finds candidates and
//! this decides. After normalising case, contractions, possessives and plurals and dropping
//! filler ("please", "can you tell me", articles), both questions must hold the same content
//! words — numbers, names, negations, every other word — and the same words after the words
//! that give a direction ("from", "to", "in", "than", …), in the same order, so a reordering
//! that swaps a direction is refused while one that only moves a clause is not. A paraphrase in other words is a miss:
//! a wrong answer costs more than a call.

/// Words that do not change what is asked.
const FILLER: &[&str] = &[
    "a",
    "an",
    "the",
    "please",
    "pls",
    "plz",
    "kindly",
    "can",
    "could",
    "would",
    "you",
    "u",
    "me",
    "i",
    "tell",
    "do",
    "does",
    "is",
    "are",
    "am",
    "be",
    "hey",
    "hi",
    "hello",
    "thanks",
    "thank",
    "just",
    "quick",
    "quickly",
    "question",
    "know",
    "want",
    "wanna",
    "need",
    "some",
    "of",
    "for",
    "in",
    "on",
    "at",
    "it",
    "there",
    "so",
    "really",
    "actually",
    "simply",
    "basically",
    "help",
    "s",
    "let",
    "us",
    "we",
    "my",
    "your",
    "possible",
    "briefly",
    "explain",
    "show",
    "give",
    "way",
    "and",
    "or",
    "any",
    "that",
    "this",
    "if",
    "by",
];

/// Words whose next content word says which way something goes (kept as pairs).
const DIRECTIONS: &[&str] = &[
    "from", "to", "into", "in", "than", "vs", "versus", "before", "after", "over", "under",
    "above", "below", "per",
];

/// Words spelled differently that ask the same.
fn same_word(w: &str) -> &str {
    match w {
        "which" => "what",
        _ => w,
    }
}

/// The question's content words (sorted) and its direction pairs (in order: "9 am in New
/// York, what time in Tokyo" is not "9 am in Tokyo, what time in New York").
#[derive(Debug, PartialEq, Eq)]
pub struct Terms {
    words: Vec<String>,
    directions: Vec<(String, String)>,
}

/// Contractions and possessives spelled out, lowercased.
fn expand(text: &str) -> String {
    let lower = text
        .to_lowercase()
        .replace(['\u{2019}', '\u{2018}', '`'], "'");
    let mut out = lower
        .replace("won't", "will not")
        .replace("can't", "can not")
        .replace("cannot", "can not")
        .replace("n't", " not")
        .replace("'re", " are")
        .replace("'ll", " will")
        .replace("'ve", " have")
        .replace("'m", " am")
        .replace("'d", " would")
        .replace("let's", "let us");
    // "what's" / "it's" / "Australia's": `is` or a possessive, neither of which asks anything.
    out = out.replace("'s", " s");
    out
}

/// Words and numbers, a decimal point or comma inside a number kept (`3.12`, `1,000`).
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let inside_number = matches!(c, '.' | ',')
            && cur.chars().last().is_some_and(|p| p.is_ascii_digit())
            && chars.get(i + 1).is_some_and(char::is_ascii_digit);
        if c.is_alphanumeric() || inside_number {
            cur.push(c);
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A plural's singular, roughly: the same on both sides is all that counts.
fn stem(w: &str) -> String {
    let n = w.len();
    if n > 4 && w.ends_with("ies") {
        return format!("{}y", &w[..n - 3]);
    }
    if n > 3 && w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        return w[..n - 1].to_string();
    }
    w.to_string()
}

impl Terms {
    pub fn of(text: &str) -> Terms {
        let toks = tokens(&expand(text));
        let content = |w: &str| !FILLER.contains(&w) && !DIRECTIONS.contains(&w);
        let mut words: Vec<String> = toks
            .iter()
            .filter(|w| content(w))
            .map(|w| stem(same_word(w)))
            .collect();
        let mut directions = Vec::new();
        for (i, w) in toks.iter().enumerate() {
            // "how to reset" asks how, not where to.
            let how_to = w == "to" && i > 0 && toks[i - 1] == "how";
            if !DIRECTIONS.contains(&w.as_str()) || how_to {
                continue;
            }
            let next = toks[i + 1..].iter().find(|n| content(n));
            if let Some(n) = next {
                directions.push((w.clone(), stem(n)));
            }
        }
        words.sort_unstable();
        Terms { words, directions }
    }
}

/// Whether `a` and `b` ask with the same words (see the module's comment).
pub fn same_question(a: &str, b: &str) -> bool {
    let (ta, tb) = (Terms::of(a), Terms::of(b));
    !ta.words.is_empty() && ta == tb
}

#[cfg(test)]
mod tests {
    use super::same_question;

    #[test]
    fn paraphrases_that_keep_their_words_agree() {
        for (a, b) in [
            (
                "What's the capital of Australia?",
                "what is the capital of australia",
            ),
            (
                "How do I sort a list in Python?",
                "In Python, how can I sort a list, please?",
            ),
            ("Can you tell me how to boil eggs", "how to boil an egg"),
            ("Convert 5 km to miles", "convert 5 km to miles please"),
        ] {
            assert!(same_question(a, b), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn near_misses_do_not() {
        for (a, b) in [
            (
                "What is the capital of Australia?",
                "What is the capital of Austria?",
            ),
            (
                "Convert Celsius to Fahrenheit",
                "Convert Fahrenheit to Celsius",
            ),
            (
                "Translate 'chat' from French to English",
                "Translate 'chat' from English to French",
            ),
            (
                "Should I take ibuprofen with food?",
                "Should I take ibuprofen without food?",
            ),
            (
                "How do I upgrade to the annual plan?",
                "How do I upgrade to the monthly plan?",
            ),
            (
                "What changed in Python 3.8?",
                "What changed in Python 3.12?",
            ),
            ("Should I refactor this?", "Should I not refactor this?"),
            ("How to enable dark mode", "How to disable dark mode"),
            ("", ""),
        ] {
            assert!(!same_question(a, b), "{a:?} vs {b:?}");
        }
    }
}
