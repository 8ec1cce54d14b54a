//! The jq subset of `jqPathExpressions`: paths (`.a.b`, `."a/b"`, `.["a"]`, `[0]`, `[]`) and
//! `select(PATH == LITERAL)` (or `!=`), joined by `|`. A pipe of paths is one longer path, so
//! an expression parses to one list of steps, evaluated over the object as jq would, keeping
//! the concrete field each result came from.

use serde_json::Value;

use super::{Field, PathError, Segment};

/// A parsed expression: its steps, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct JqPath {
    steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    /// `[]`: every item of an array, every value of an object.
    Each,
    /// `select(path == literal)` (`equal`) or `!=`: keeps what the comparison holds for.
    Select {
        path: Vec<Step>,
        equal: bool,
        literal: Value,
    },
}

impl JqPath {
    /// Parses `text`; anything outside the subset is refused with its position.
    pub fn parse(text: &str) -> Result<JqPath, PathError> {
        let tokens = lex(text)?;
        let mut parser = Parser {
            tokens,
            next: 0,
            end: text.chars().count(),
        };
        let steps = parser.pipeline()?;
        if !steps.iter().any(|s| !matches!(s, Step::Select { .. })) {
            return Err(PathError::at(
                0,
                "the expression names the whole object: name a field, such as .spec.replicas",
            ));
        }
        Ok(JqPath { steps })
    }

    /// The fields the expression names in `value` (none when nothing matches).
    pub fn resolve(&self, value: &Value) -> Vec<Field> {
        let mut current: Vec<(Field, &Value)> = vec![(Vec::new(), value)];
        for step in &self.steps {
            let mut next = Vec::new();
            for (field, value) in current {
                step.apply(field, value, &mut next);
            }
            current = next;
        }
        current
            .into_iter()
            .map(|(field, _)| field)
            .filter(|field| !field.is_empty())
            .collect()
    }
}

impl Step {
    fn apply<'a>(&self, field: Field, value: &'a Value, out: &mut Vec<(Field, &'a Value)>) {
        let with = |segment: Segment| {
            let mut longer = field.clone();
            longer.push(segment);
            longer
        };
        match (self, value) {
            (Step::Field(key), Value::Object(map)) => {
                if let Some(inner) = map.get(key) {
                    out.push((with(Segment::Key(key.clone())), inner));
                }
            }
            (Step::Index(index), Value::Array(items)) => {
                if let Some(inner) = items.get(*index) {
                    out.push((with(Segment::Index(*index)), inner));
                }
            }
            (Step::Each, Value::Array(items)) => {
                for (index, inner) in items.iter().enumerate() {
                    out.push((with(Segment::Index(index)), inner));
                }
            }
            (Step::Each, Value::Object(map)) => {
                for (key, inner) in map {
                    out.push((with(Segment::Key(key.clone())), inner));
                }
            }
            (
                Step::Select {
                    path,
                    equal,
                    literal,
                },
                _,
            ) => {
                let got = relative(value, path).unwrap_or(&Value::Null);
                if same(got, literal) == *equal {
                    out.push((field, value));
                }
            }
            _ => {}
        }
    }
}

/// The value at `path` (fields and indexes only) below `value`.
fn relative<'a>(value: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |value, step| match (step, value) {
            (Step::Field(key), Value::Object(map)) => map.get(key),
            (Step::Index(index), Value::Array(items)) => items.get(*index),
            _ => None,
        })
}

/// jq's equality: numbers by value (1 == 1.0), the rest structurally.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Dot,
    Ident(String),
    Str(String),
    Num(serde_json::Number),
    Open,
    Close,
    Pipe,
    LParen,
    RParen,
    Eq,
    Ne,
}

fn lex(text: &str) -> Result<Vec<(usize, Token)>, PathError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        let start = at;
        let token = match c {
            c if c.is_whitespace() => {
                at += 1;
                continue;
            }
            '.' => Token::Dot,
            '[' => Token::Open,
            ']' => Token::Close,
            '|' => Token::Pipe,
            '(' => Token::LParen,
            ')' => Token::RParen,
            '=' | '!' if chars.get(at + 1) == Some(&'=') => {
                at += 1;
                if c == '=' { Token::Eq } else { Token::Ne }
            }
            '"' => {
                let mut end = at + 1;
                while end < chars.len() && chars[end] != '"' {
                    end += if chars[end] == '\\' { 2 } else { 1 };
                }
                if end >= chars.len() {
                    return Err(PathError::at(start, "a string that is never closed"));
                }
                let literal: String = chars[at..=end].iter().collect();
                let value: String = serde_json::from_str(&literal)
                    .map_err(|e| PathError::at(start, format!("a malformed string: {e}")))?;
                at = end;
                Token::Str(value)
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut end = at;
                while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_')
                {
                    end += 1;
                }
                let ident: String = chars[at..end].iter().collect();
                at = end - 1;
                Token::Ident(ident)
            }
            c if c.is_ascii_digit() || c == '-' => {
                let mut end = at + 1;
                while end < chars.len() && (chars[end].is_ascii_digit() || chars[end] == '.') {
                    end += 1;
                }
                let literal: String = chars[at..end].iter().collect();
                let number: serde_json::Number = literal
                    .parse()
                    .map_err(|_| PathError::at(start, format!("{literal:?} is not a number")))?;
                at = end - 1;
                Token::Num(number)
            }
            other => {
                return Err(PathError::at(
                    start,
                    format!(
                        "{other:?} is outside the supported subset (paths, [], [N], select(PATH == VALUE), |)"
                    ),
                ));
            }
        };
        tokens.push((start, token));
        at += 1;
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<(usize, Token)>,
    next: usize,
    /// The text's length, the position of "the end".
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next).map(|(_, t)| t)
    }

    fn position(&self) -> usize {
        self.tokens.get(self.next).map_or(self.end, |(at, _)| *at)
    }

    fn error<T>(&self, message: impl Into<String>) -> Result<T, PathError> {
        Err(PathError::at(self.position(), message))
    }

    fn bump(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.next).map(|(_, t)| t.clone());
        self.next += 1;
        token
    }

    fn expect(&mut self, want: &Token, what: &str) -> Result<(), PathError> {
        if self.peek() == Some(want) {
            self.next += 1;
            Ok(())
        } else {
            self.error(format!("expected {what}"))
        }
    }

    fn pipeline(&mut self) -> Result<Vec<Step>, PathError> {
        let mut steps = self.stage()?;
        while self.peek() == Some(&Token::Pipe) {
            self.next += 1;
            steps.extend(self.stage()?);
        }
        if self.peek().is_some() {
            return self.error("expected | or the end of the expression");
        }
        Ok(steps)
    }

    fn stage(&mut self) -> Result<Vec<Step>, PathError> {
        match self.peek() {
            Some(Token::Dot) => self.path(),
            Some(Token::Ident(name)) if name == "select" => {
                self.next += 1;
                self.expect(&Token::LParen, "( after select")?;
                let path_at = self.position();
                let path = self.path()?;
                if path
                    .iter()
                    .any(|s| !matches!(s, Step::Field(_) | Step::Index(_)))
                {
                    return Err(PathError::at(
                        path_at,
                        "inside select, a path of fields and indexes only",
                    ));
                }
                let equal = match self.bump() {
                    Some(Token::Eq) => true,
                    Some(Token::Ne) => false,
                    _ => {
                        self.next -= 1;
                        return self.error("expected == or != inside select");
                    }
                };
                let literal = match self.bump() {
                    Some(Token::Str(s)) => Value::String(s),
                    Some(Token::Num(n)) => Value::Number(n),
                    Some(Token::Ident(word)) if word == "true" => Value::Bool(true),
                    Some(Token::Ident(word)) if word == "false" => Value::Bool(false),
                    Some(Token::Ident(word)) if word == "null" => Value::Null,
                    _ => {
                        self.next -= 1;
                        return self.error("expected a string, number, true, false or null");
                    }
                };
                self.expect(&Token::RParen, ") closing select")?;
                Ok(vec![Step::Select {
                    path,
                    equal,
                    literal,
                }])
            }
            Some(Token::Ident(name)) => {
                let name = name.clone();
                self.error(format!(
                    "{name:?} is outside the supported subset: only paths and select(...)"
                ))
            }
            _ => self.error("expected a path starting with ."),
        }
    }

    /// `.` then steps: `.a`, `."a"`, `.[..]`, `[..]`.
    fn path(&mut self) -> Result<Vec<Step>, PathError> {
        self.expect(&Token::Dot, "a path starting with .")?;
        let mut steps = Vec::new();
        // Right after the leading dot: a name, a quoted name or a bracket (or nothing: `.`).
        match self.peek() {
            Some(Token::Ident(_) | Token::Str(_)) => steps.push(self.name()?),
            Some(Token::Open) => steps.push(self.bracket()?),
            Some(Token::Dot) => {
                return self.error("`..` (recursive descent) is outside the supported subset");
            }
            _ => {}
        }
        loop {
            match self.peek() {
                Some(Token::Dot) => {
                    self.next += 1;
                    match self.peek() {
                        Some(Token::Ident(_) | Token::Str(_)) => steps.push(self.name()?),
                        Some(Token::Open) => steps.push(self.bracket()?),
                        _ => return self.error("expected a field name after ."),
                    }
                }
                Some(Token::Open) => steps.push(self.bracket()?),
                _ => return Ok(steps),
            }
        }
    }

    fn name(&mut self) -> Result<Step, PathError> {
        match self.bump() {
            Some(Token::Ident(name) | Token::Str(name)) => Ok(Step::Field(name)),
            _ => {
                self.next -= 1;
                self.error("expected a field name")
            }
        }
    }

    /// `[]`, `["key"]` or `[N]`, the `[` next.
    fn bracket(&mut self) -> Result<Step, PathError> {
        self.expect(&Token::Open, "[")?;
        let step = match self.peek() {
            Some(Token::Close) => Step::Each,
            Some(Token::Str(key)) => {
                let key = key.clone();
                self.next += 1;
                Step::Field(key)
            }
            Some(Token::Num(number)) => {
                let Some(index) = number.as_u64().and_then(|n| usize::try_from(n).ok()) else {
                    return self.error("an index is a whole number from 0");
                };
                self.next += 1;
                Step::Index(index)
            }
            _ => return self.error("expected ], a quoted key or an index inside [ ]"),
        };
        self.expect(&Token::Close, "]")?;
        Ok(step)
    }
}
