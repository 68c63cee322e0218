//! The Markdown building blocks every section uses: the templates in `infra/bench/templates/`
//! filled from values, table rows (each table's header is its template's), numbers, and one
//! section replaced in place.
//!
//! A template file holds one or more parts. A part starts at a line `<!-- part: NAME -->` and runs
//! to the next such line or the end; text before the first marker is the part `main`. In a part,
//! `{{key}}` is replaced by the value given for `key`. A key without a value, or a value no key
//! asks for, is an error: the template and the code that fills it cannot drift apart unnoticed.

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One template file (see the module's documentation), named for its errors.
#[derive(Debug, Clone, Copy)]
pub struct Template {
    pub name: &'static str,
    pub text: &'static str,
}

/// `Template { name, text: include_str!(templates/name) }`.
#[macro_export]
macro_rules! template {
    ($file:literal) => {
        $crate::markdown::Template {
            name: $file,
            text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/", $file)),
        }
    };
}

impl Template {
    /// The text of the part `part`.
    pub fn part(&self, part: &str) -> Result<&'static str, Error> {
        let marker = |name: &str| format!("<!-- part: {name} -->\n");
        if part == "main" {
            return Ok(self.text.split("<!-- part: ").next().unwrap_or(""));
        }
        let start = self
            .text
            .find(&marker(part))
            .ok_or_else(|| format!("template {}: no part {part}", self.name))?
            + marker(part).len();
        let rest = &self.text[start..];
        Ok(&rest[..rest.find("<!-- part: ").unwrap_or(rest.len())])
    }

    /// The part `part` with every `{{key}}` replaced by its value in `values`.
    pub fn fill(&self, part: &str, values: &[(&str, String)]) -> Result<String, Error> {
        fill(self.part(part)?, values)
            .map_err(|e| format!("template {} part {part}: {e}", self.name).into())
    }

    /// Whether `text` is the part `part` filled with some values: its text between the keys, in
    /// order, with in place of each key a value that opens no table cell and no paragraph (no `|`,
    /// no blank line). What holds a rendered section to its template.
    pub fn matches(&self, part: &str, text: &str) -> Result<bool, Error> {
        let template = self.part(part)?;
        let pieces: Vec<&str> = template
            .split("{{")
            .enumerate()
            .map(|(i, p)| match i {
                0 => p,
                _ => p.split_once("}}").map_or(p, |(_, after)| after),
            })
            .collect();
        let [first, middle @ .., last] = pieces.as_slice() else {
            return Ok(text == template);
        };
        let Some(mut rest) = text.strip_prefix(first).and_then(|r| r.strip_suffix(last)) else {
            return Ok(false);
        };
        let value = |v: &str| !v.contains('|') && !v.contains("\n\n");
        for piece in middle {
            match rest.find(piece) {
                Some(i) if value(&rest[..i]) => rest = &rest[i + piece.len()..],
                _ => return Ok(false),
            }
        }
        Ok(value(rest))
    }
}

/// `text` with every `{{key}}` replaced by its value in `values`; an error for a key without a
/// value and for a value no key asks for.
pub fn fill(text: &str, values: &[(&str, String)]) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut used = vec![false; values.len()];
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after.find("}}").ok_or("a `{{` without `}}`")?;
        let key = &after[..close];
        let i = values
            .iter()
            .position(|(k, _)| *k == key)
            .ok_or_else(|| format!("no value for {{{{{key}}}}}"))?;
        used[i] = true;
        out.push_str(&values[i].1);
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    match values.iter().zip(&used).find(|(_, used)| !**used) {
        Some(((key, _), _)) => Err(format!(
            "{key} is given but the template has no {{{{{key}}}}}"
        )),
        None => Ok(out),
    }
}

/// The rows of a Markdown table, one line each (the header and its rule are the template's).
pub fn rows_string(rows: impl IntoIterator<Item = Vec<String>>) -> String {
    rows.into_iter()
        .map(|row| format!("| {} |\n", row.join(" | ")))
        .collect()
}

/// `1000` as `1,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `text` as lines of at most 100 characters, broken at spaces (a longer word gets a line of its
/// own), as the rest of the file is written; each line ends with a newline.
pub fn paragraph(text: &str) -> String {
    const WIDTH: usize = 100;
    let mut w = String::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > WIDTH {
            w.push_str(&line);
            w.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    w.push_str(&line);
    w.push('\n');
    w
}

/// `doc` with its section `number` (from the line starting `## {number}.` to the next `## `
/// heading or the end) replaced by `section` (which ends with a blank line); an error if `doc` has
/// no such section. `bench render-section` renders one section in place with it.
pub fn replace_section(doc: &str, number: u32, section: &str) -> Result<String, Error> {
    let heading = format!("## {number}.");
    let start = if doc.starts_with(&heading) {
        0
    } else {
        doc.find(&format!("\n{heading}"))
            .map(|i| i + 1)
            .ok_or_else(|| {
                format!(
                    "BENCHMARKS.md has no section {number} to replace; run `make bench` in full"
                )
            })?
    };
    let end = doc[start + 1..]
        .find("\n## ")
        .map_or(doc.len(), |i| start + 1 + i + 1);
    let mut out = String::with_capacity(doc.len() + section.len());
    out.push_str(&doc[..start]);
    out.push_str(section);
    out.push_str(&doc[end..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_each_key_and_refuses_a_missing_or_unused_one() {
        let v = |k: &'static str, x: &str| (k, x.to_owned());
        assert_eq!(
            fill("a {{x}} b {{y}} {{x}}", &[v("x", "1"), v("y", "2")]).unwrap(),
            "a 1 b 2 1"
        );
        assert!(fill("a {{x}}", &[])
            .unwrap_err()
            .contains("no value for {{x}}"));
        assert!(fill("a", &[v("x", "1")])
            .unwrap_err()
            .contains("x is given"));
        assert!(fill("a {{x", &[v("x", "1")]).is_err());
    }

    #[test]
    fn a_template_has_named_parts() {
        let t = Template {
            name: "t.md",
            text: "head {{a}}\n<!-- part: one -->\nfirst\n<!-- part: two -->\nsecond {{b}}\n",
        };
        assert_eq!(t.fill("main", &[("a", "A".into())]).unwrap(), "head A\n");
        assert_eq!(t.part("one").unwrap(), "first\n");
        assert_eq!(t.fill("two", &[("b", "B".into())]).unwrap(), "second B\n");
        assert!(t.part("three").is_err());
    }

    #[test]
    fn a_filled_part_matches_its_template_and_an_edited_one_does_not() {
        let t = Template {
            name: "t.md",
            text: "## 8. x\n\n| a | {{a}} |\n| b | {{b}} |\n",
        };
        let filled = t
            .fill("main", &[("a", "1,000".into()), ("b", "2".into())])
            .unwrap();
        assert!(t.matches("main", &filled).unwrap());
        assert!(!t
            .matches("main", &filled.replace("| b |", "| c |"))
            .unwrap());
        assert!(!t
            .matches("main", &filled.replace("## 8. x", "## 8. y"))
            .unwrap());
        assert!(!t
            .matches("main", &(filled.clone() + "a line by hand\n"))
            .unwrap());
        assert!(!t
            .matches("main", &(filled.clone() + "| c | 3 |\n"))
            .unwrap());
    }

    #[test]
    fn tables_numbers_and_paragraphs() {
        let w = rows_string([
            vec!["1".into(), "x / y".into()],
            vec!["2".into(), String::new()],
        ]);
        assert_eq!(w, "| 1 | x / y |\n| 2 |  |\n");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
        let long = "word ".repeat(30);
        let p = paragraph(long.trim_end());
        assert!(p.lines().all(|l| l.len() <= 100), "{p}");
        assert_eq!(p.lines().count(), 2);
    }

    #[test]
    fn replace_section_replaces_one_section_only() {
        let doc = "# B\n\n## 3. x\n\nthree\n\n## 4. old\n\nold\n\n## 5. y\n\nfive\n";
        let out = replace_section(doc, 4, "## 4. new\n\nnew\n\n").unwrap();
        assert_eq!(
            out,
            "# B\n\n## 3. x\n\nthree\n\n## 4. new\n\nnew\n\n## 5. y\n\nfive\n"
        );
        let last = replace_section("# B\n\n## 4. old\n\nold\n", 4, "## 4. new\n").unwrap();
        assert_eq!(last, "# B\n\n## 4. new\n");
        assert!(replace_section("# B\n\n## 5. y\n", 4, "x").is_err());
    }
}
