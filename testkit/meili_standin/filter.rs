//! Meilisearch filter expressions: parsing (`=`, `!=`, `>`, `>=`, `<`, `<=`,
//! `TO`, `IN [..]`, `EXISTS`, `IS NULL`, `IS EMPTY`, their `NOT` forms, `NOT`,
//! `AND`, `OR`, parentheses, quoted values, and the array form where inner
//! arrays are OR-ed and outer items AND-ed), the filterable-attribute check
//! with Meilisearch's messages (`1:5 text = x` positions), and evaluation
//! against a document. String equality is case-insensitive, as in Meilisearch.

use serde_json::Value;

use crate::index::Document;

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Comparison {
    Equal,
    Greater,
    GreaterOrEqual,
    Less,
    LessOrEqual,
}

/// What a condition tests about an attribute.
#[derive(Clone, Debug)]
enum Test {
    Compare(Comparison, String),
    Between(String, String),
    In(Vec<String>),
    Exists,
    IsNull,
    IsEmpty,
}

/// `attribute <test>`, remembering where the attribute was written for messages.
#[derive(Clone, Debug)]
pub struct Condition {
    pub attribute: String,
    /// 0-based character range of the attribute in `source`.
    span: (usize, usize),
    source: String,
    test: Test,
}

/// A parsed filter.
#[derive(Clone, Debug)]
pub enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
    Condition(Condition),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Open,
    Close,
    OpenBracket,
    CloseBracket,
    Comma,
    Operator(&'static str),
    Word(String),
    Quoted(String),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    start: usize,
    end: usize,
}

/// A message followed by `start:end source`, as Meilisearch reports filter errors.
fn located(message: &str, start: usize, end: usize, source: &str) -> String {
    format!("{message}\n{}:{} {source}", start + 1, end + 1)
}

fn tokenize(source: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let simple = match c {
            '(' => Some(Tok::Open),
            ')' => Some(Tok::Close),
            '[' => Some(Tok::OpenBracket),
            ']' => Some(Tok::CloseBracket),
            ',' => Some(Tok::Comma),
            _ => None,
        };
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if let Some(tok) = simple {
            i += 1;
            tokens.push(Token { tok, start, end: i });
            continue;
        }
        let next = chars.get(i + 1).copied();
        let operator = match (c, next) {
            ('!', Some('=')) => Some(("!=", 2)),
            ('>', Some('=')) => Some((">=", 2)),
            ('<', Some('=')) => Some(("<=", 2)),
            ('>', _) => Some((">", 1)),
            ('<', _) => Some(("<", 1)),
            ('=', _) => Some(("=", 1)),
            _ => None,
        };
        if let Some((op, len)) = operator {
            i += len;
            tokens.push(Token {
                tok: Tok::Operator(op),
                start,
                end: i,
            });
            continue;
        }
        if c == '\'' || c == '"' {
            let mut text = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => {
                        return Err(located(
                            &format!(
                            "Expression `{}` is missing the following closing delimiter: `{c}`.",
                            chars[start..].iter().collect::<String>()
                        ),
                            start,
                            chars.len(),
                            source,
                        ))
                    }
                    Some('\\') if chars.get(i + 1).is_some() => {
                        text.push(chars[i + 1]);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&other) => {
                        text.push(other);
                        i += 1;
                    }
                }
            }
            tokens.push(Token {
                tok: Tok::Quoted(text),
                start,
                end: i,
            });
            continue;
        }
        let mut word = String::new();
        while let Some(&w) = chars.get(i) {
            if w.is_whitespace() || "()[],=!<>'\"".contains(w) {
                break;
            }
            word.push(w);
            i += 1;
        }
        if word.is_empty() {
            return Err(located(
                &format!("Unexpected character `{c}`."),
                start,
                start + 1,
                source,
            ));
        }
        tokens.push(Token {
            tok: Tok::Word(word),
            start,
            end: i,
        });
    }
    Ok(tokens)
}

struct Parser<'a> {
    source: &'a str,
    length: usize,
    tokens: Vec<Token>,
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at).map(|t| &t.tok)
    }

    fn peek_keyword(&self, keyword: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(w)) if w == keyword)
    }

    fn peek_keyword_at(&self, offset: usize, keyword: &str) -> bool {
        matches!(self.tokens.get(self.at + offset).map(|t| &t.tok), Some(Tok::Word(w)) if w == keyword)
    }

    fn position(&self) -> usize {
        self.tokens.get(self.at).map_or(self.length, |t| t.start)
    }

    fn error(&self, message: &str) -> String {
        let position = self.position();
        located(message, position, self.length.max(position), self.source)
    }

    fn expected_operation(&self) -> String {
        let rest: String = self.source.chars().skip(self.position()).collect();
        self.error(&format!(
            "Was expecting an operation `=`, `!=`, `>=`, `>`, `<=`, `<`, `IN`, `NOT IN`, `TO`, \
             `EXISTS`, `NOT EXISTS`, `IS NULL`, `IS NOT NULL`, `IS EMPTY`, `IS NOT EMPTY`, \
             `_geoRadius`, or `_geoBoundingBox` at `{rest}`."
        ))
    }

    fn or(&mut self) -> Result<Filter, String> {
        let mut items = vec![self.and()?];
        while self.peek_keyword("OR") {
            self.at += 1;
            items.push(self.and()?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Filter::Or(items)
        })
    }

    fn and(&mut self) -> Result<Filter, String> {
        let mut items = vec![self.not()?];
        while self.peek_keyword("AND") {
            self.at += 1;
            items.push(self.not()?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Filter::And(items)
        })
    }

    fn not(&mut self) -> Result<Filter, String> {
        if self.peek_keyword("NOT") {
            self.at += 1;
            return Ok(Filter::Not(Box::new(self.not()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Filter, String> {
        if self.peek() == Some(&Tok::Open) {
            let open = self.position();
            self.at += 1;
            let inner = self.or()?;
            if self.peek() != Some(&Tok::Close) {
                return Err(located(
                    &format!(
                        "Expression `{}` is missing the following closing delimiter: `)`.",
                        self.source.chars().skip(open).collect::<String>()
                    ),
                    open,
                    self.length,
                    self.source,
                ));
            }
            self.at += 1;
            return Ok(inner);
        }
        self.condition()
    }

    fn value(&mut self) -> Result<String, String> {
        match self.tokens.get(self.at).map(|t| t.tok.clone()) {
            Some(Tok::Word(w)) | Some(Tok::Quoted(w)) => {
                self.at += 1;
                Ok(w)
            }
            None => Err(self.error("Was expecting a value but instead got nothing.")),
            Some(_) => {
                Err(self.error("Was expecting a value but instead got an unexpected character."))
            }
        }
    }

    fn condition(&mut self) -> Result<Filter, String> {
        let Some(token) = self.tokens.get(self.at).cloned() else {
            return Err(self.error("Was expecting a value but instead got nothing."));
        };
        let attribute = match token.tok {
            Tok::Word(w) | Tok::Quoted(w) => w,
            _ => return Err(self.expected_operation()),
        };
        self.at += 1;
        let make = |test| Condition {
            attribute: attribute.clone(),
            span: (token.start, token.end),
            source: self.source.to_string(),
            test,
        };
        let leaf = |test| Filter::Condition(make(test));
        let negated = |test| Filter::Not(Box::new(Filter::Condition(make(test))));
        match self.peek().cloned() {
            Some(Tok::Operator(op)) => {
                self.at += 1;
                let value = self.value()?;
                Ok(match op {
                    "=" => leaf(Test::Compare(Comparison::Equal, value)),
                    "!=" => negated(Test::Compare(Comparison::Equal, value)),
                    ">" => leaf(Test::Compare(Comparison::Greater, value)),
                    ">=" => leaf(Test::Compare(Comparison::GreaterOrEqual, value)),
                    "<" => leaf(Test::Compare(Comparison::Less, value)),
                    _ => leaf(Test::Compare(Comparison::LessOrEqual, value)),
                })
            }
            Some(Tok::Word(w)) if w == "EXISTS" => {
                self.at += 1;
                Ok(leaf(Test::Exists))
            }
            Some(Tok::Word(w)) if w == "IN" => {
                self.at += 1;
                Ok(leaf(Test::In(self.list()?)))
            }
            Some(Tok::Word(w)) if w == "NOT" && self.peek_keyword_at(1, "EXISTS") => {
                self.at += 2;
                Ok(negated(Test::Exists))
            }
            Some(Tok::Word(w)) if w == "NOT" && self.peek_keyword_at(1, "IN") => {
                self.at += 2;
                Ok(negated(Test::In(self.list()?)))
            }
            Some(Tok::Word(w)) if w == "IS" => {
                self.at += 1;
                let not = self.peek_keyword("NOT");
                if not {
                    self.at += 1;
                }
                let test = if self.peek_keyword("NULL") {
                    Test::IsNull
                } else if self.peek_keyword("EMPTY") {
                    Test::IsEmpty
                } else {
                    return Err(self.expected_operation());
                };
                self.at += 1;
                Ok(if not { negated(test) } else { leaf(test) })
            }
            Some(Tok::Word(_)) | Some(Tok::Quoted(_)) if self.peek_keyword_at(1, "TO") => {
                let low = self.value()?;
                self.at += 1;
                let high = self.value()?;
                Ok(leaf(Test::Between(low, high)))
            }
            _ => Err(self.expected_operation()),
        }
    }

    fn list(&mut self) -> Result<Vec<String>, String> {
        if self.peek() != Some(&Tok::OpenBracket) {
            return Err(self.error("Expected `[` after `IN` keyword."));
        }
        self.at += 1;
        let mut values = Vec::new();
        loop {
            match self.peek() {
                Some(Tok::CloseBracket) => {
                    self.at += 1;
                    return Ok(values);
                }
                Some(Tok::Comma) => self.at += 1,
                _ => values.push(self.value()?),
            }
        }
    }
}

/// Parses one string expression; `None` when it is blank.
fn parse_str(source: &str) -> Result<Option<Filter>, String> {
    if source.trim().is_empty() {
        return Ok(None);
    }
    let mut parser = Parser {
        source,
        length: source.chars().count(),
        tokens: tokenize(source)?,
        at: 0,
    };
    let filter = parser.or()?;
    if parser.at < parser.tokens.len() {
        let rest: String = source.chars().skip(parser.position()).collect();
        return Err(parser.error(&format!(
            "Found unexpected characters at the end of the filter: `{rest}`. You probably forgot an `OR` or an `AND` rule."
        )));
    }
    Ok(Some(filter))
}

/// Parses a `filter` parameter: a string, or an array of strings and arrays of strings.
pub fn parse(filter: &Value) -> Result<Option<Filter>, String> {
    match filter {
        Value::Null => Ok(None),
        Value::String(source) => parse_str(source),
        Value::Array(items) => {
            let mut all = Vec::new();
            for item in items {
                match item {
                    Value::String(source) => all.extend(parse_str(source)?),
                    Value::Array(alternatives) => {
                        let mut any = Vec::new();
                        for alternative in alternatives {
                            match alternative {
                                Value::String(source) => any.extend(parse_str(source)?),
                                other => return Err(invalid_type(other)),
                            }
                        }
                        if !any.is_empty() {
                            all.push(Filter::Or(any));
                        }
                    }
                    other => return Err(invalid_type(other)),
                }
            }
            Ok((!all.is_empty()).then_some(Filter::And(all)))
        }
        other => Err(invalid_type(other)),
    }
}

fn invalid_type(value: &Value) -> String {
    format!("Invalid syntax for the filter parameter: `expected String, Array, found: {value}`.")
}

fn pattern_matches(pattern: &str, attribute: &str) -> bool {
    if pattern == "*" || pattern == attribute {
        return true;
    }
    if let Some(prefix) = pattern.strip_suffix('*') {
        return attribute.starts_with(prefix);
    }
    if let Some(suffix) = pattern.strip_prefix('*') {
        return attribute.ends_with(suffix);
    }
    attribute
        .strip_prefix(pattern)
        .is_some_and(|rest| rest.starts_with('.'))
}

impl Filter {
    fn conditions(&self) -> Vec<&Condition> {
        match self {
            Filter::And(items) | Filter::Or(items) => {
                items.iter().flat_map(Filter::conditions).collect()
            }
            Filter::Not(inner) => inner.conditions(),
            Filter::Condition(condition) => vec![condition],
        }
    }

    /// The message Meilisearch gives when an attribute is not filterable, if one is not.
    pub fn check_filterable(&self, patterns: &[String]) -> Result<(), String> {
        let Some(bad) = self
            .conditions()
            .into_iter()
            .find(|c| !patterns.iter().any(|p| pattern_matches(p, &c.attribute)))
        else {
            return Ok(());
        };
        let hint = if patterns.is_empty() {
            "This index does not have configured filterable attributes.".to_string()
        } else {
            format!(
                "Available filterable attribute patterns are: `{}`.",
                patterns.join(", ")
            )
        };
        Err(located(
            &format!("Attribute `{}` is not filterable. {hint}", bad.attribute),
            bad.span.0,
            bad.span.1,
            &bad.source,
        ))
    }

    /// Whether `doc` passes the filter.
    pub fn matches(&self, doc: &Document) -> bool {
        match self {
            Filter::And(items) => items.iter().all(|f| f.matches(doc)),
            Filter::Or(items) => items.iter().any(|f| f.matches(doc)),
            Filter::Not(inner) => !inner.matches(doc),
            Filter::Condition(condition) => condition.matches(doc),
        }
    }
}

/// The values found at a dotted `path` (through nested objects and arrays of objects).
fn values_at<'a>(object: &'a Document, path: &str, found: &mut Vec<&'a Value>) {
    if let Some(value) = object.get(path) {
        found.push(value);
    }
    for (split, _) in path.match_indices('.') {
        let (head, rest) = (&path[..split], &path[split + 1..]);
        match object.get(head) {
            Some(Value::Object(inner)) => values_at(inner, rest, found),
            Some(Value::Array(items)) => {
                for item in items {
                    if let Value::Object(inner) = item {
                        values_at(inner, rest, found);
                    }
                }
            }
            _ => {}
        }
    }
}

fn as_number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

/// Compares a document value with a filter literal; `None` when incomparable.
fn compare(value: &Value, literal: &str) -> Option<std::cmp::Ordering> {
    match value {
        Value::Number(n) => n.as_f64()?.partial_cmp(&as_number(literal)?),
        Value::String(s) => Some(s.to_lowercase().cmp(&literal.to_lowercase())),
        Value::Bool(b) => (literal == b.to_string()).then_some(std::cmp::Ordering::Equal),
        _ => None,
    }
}

impl Condition {
    fn matches(&self, doc: &Document) -> bool {
        let mut raw = Vec::new();
        values_at(doc, &self.attribute, &mut raw);
        let scalars = || {
            raw.iter().flat_map(|value| match value {
                Value::Array(items) => items.iter().collect::<Vec<_>>(),
                other => vec![*other],
            })
        };
        use std::cmp::Ordering::*;
        match &self.test {
            Test::Exists => !raw.is_empty(),
            Test::IsNull => raw.iter().any(|v| v.is_null()),
            Test::IsEmpty => raw.iter().any(|v| match v {
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
                _ => false,
            }),
            Test::In(literals) => {
                scalars().any(|v| literals.iter().any(|l| compare(v, l) == Some(Equal)))
            }
            Test::Between(low, high) => scalars().any(|v| {
                matches!(compare(v, low), Some(Greater | Equal))
                    && matches!(compare(v, high), Some(Less | Equal))
            }),
            Test::Compare(comparison, literal) => scalars().any(|v| {
                let Some(order) = compare(v, literal) else {
                    return false;
                };
                match comparison {
                    Comparison::Equal => order == Equal,
                    Comparison::Greater => order == Greater,
                    Comparison::GreaterOrEqual => order != Less,
                    Comparison::Less => order == Less,
                    Comparison::LessOrEqual => order != Greater,
                }
            }),
        }
    }
}
