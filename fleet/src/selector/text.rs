//! The string syntax of label selectors, as `kubectl -l` and the `labelSelector` query
//! parameter write them: `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
//!
//! A small recursive-descent parser over characters; every error gives the position in the
//! input. Keys and values are checked by [`Requirement::new`].

use super::{Operator, Requirement, SelectorError};

/// A recursive-descent parser of the kubectl selector syntax, over characters.
pub(super) struct StrParser<'a> {
    input: &'a str,
    chars: Vec<char>,
    position: usize,
}

/// Characters that end a key or value in the string syntax.
fn is_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | '=' | '!' | '(' | ')' | '<' | '>')
}

impl<'a> StrParser<'a> {
    pub(super) fn new(input: &'a str) -> StrParser<'a> {
        StrParser {
            input,
            chars: input.chars().collect(),
            position: 0,
        }
    }

    fn error(&self, reason: impl Into<String>) -> SelectorError {
        SelectorError::Syntax {
            input: self.input.to_owned(),
            position: self.position,
            reason: reason.into(),
        }
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.position += 1;
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.position).copied()
    }

    /// Consumes `text` if it comes next.
    fn eat(&mut self, text: &str) -> bool {
        let wanted: Vec<char> = text.chars().collect();
        if self.chars[self.position..].starts_with(&wanted) {
            self.position += wanted.len();
            true
        } else {
            false
        }
    }

    /// A run of non-special characters (possibly empty).
    fn word(&mut self) -> String {
        let start = self.position;
        while self.peek().is_some_and(|c| !is_special(c)) {
            self.position += 1;
        }
        self.chars[start..self.position].iter().collect()
    }

    pub(super) fn parse(mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut requirements = Vec::new();
        self.skip_whitespace();
        if self.peek().is_none() {
            return Ok(requirements);
        }
        loop {
            requirements.push(self.requirement()?);
            self.skip_whitespace();
            match self.peek() {
                None => return Ok(requirements),
                Some(',') => self.position += 1,
                Some(c) => return Err(self.error(format!("expected ',' or the end, found {c:?}"))),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        self.skip_whitespace();
        if self.eat("!") {
            self.skip_whitespace();
            let key = self.key()?;
            return self.build(&key, Operator::DoesNotExist, Vec::new());
        }
        let key = self.key()?;
        self.skip_whitespace();
        match self.peek() {
            None | Some(',') => self.build(&key, Operator::Exists, Vec::new()),
            Some('=') | Some('!') => {
                let operator = if self.eat("!=") {
                    Operator::NotIn
                } else if self.eat("==") || self.eat("=") {
                    Operator::In
                } else {
                    return Err(self.error("expected '=', '==' or '!='"));
                };
                self.skip_whitespace();
                let value = self.word();
                self.build(&key, operator, vec![value])
            }
            Some('<') | Some('>') => {
                Err(self.error("'<' and '>' are not supported in label selectors"))
            }
            Some(_) => {
                let operator = match self.word().as_str() {
                    "in" => Operator::In,
                    "notin" => Operator::NotIn,
                    "" => {
                        return Err(
                            self.error(format!("unexpected {:?}", self.peek().unwrap_or(' ')))
                        );
                    }
                    other => {
                        return Err(self.error(format!(
                            "expected '=', '!=', 'in' or 'notin' after key {key:?}, found {other:?}"
                        )));
                    }
                };
                let values = self.value_set()?;
                self.build(&key, operator, values)
            }
        }
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        let key = self.word();
        if key.is_empty() {
            return Err(match self.peek() {
                None => self.error("expected a label key, found the end"),
                Some(c) => self.error(format!("expected a label key, found {c:?}")),
            });
        }
        Ok(key)
    }

    /// `(a, b, c)`; values may be empty strings, the set may not.
    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        self.skip_whitespace();
        if !self.eat("(") {
            return Err(self.error("expected '(' to open the set of values"));
        }
        let mut values = Vec::new();
        self.skip_whitespace();
        if self.eat(")") {
            return Err(self.error("the set of values must not be empty"));
        }
        loop {
            self.skip_whitespace();
            values.push(self.word());
            self.skip_whitespace();
            if self.eat(",") {
                continue;
            }
            if self.eat(")") {
                return Ok(values);
            }
            return Err(match self.peek() {
                None => self.error("unterminated set of values: missing ')'"),
                Some(c) => self.error(format!(
                    "expected ',' or ')' in the set of values, found {c:?}"
                )),
            });
        }
    }

    fn build(
        &self,
        key: &str,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectorError> {
        Requirement::new(key, operator, values)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Selector;
    use super::*;

    #[test]
    fn string_syntax_parses_every_form() {
        let selector = Selector::parse_str("a=b, c!=d,e in (x, y),!f,g==h,i notin (z),j").unwrap();
        let expected = Selector::from_requirements(vec![
            Requirement::new("a", Operator::In, ["b".to_owned()]).unwrap(),
            Requirement::new("c", Operator::NotIn, ["d".to_owned()]).unwrap(),
            Requirement::new("e", Operator::In, ["x".to_owned(), "y".to_owned()]).unwrap(),
            Requirement::new("f", Operator::DoesNotExist, []).unwrap(),
            Requirement::new("g", Operator::In, ["h".to_owned()]).unwrap(),
            Requirement::new("i", Operator::NotIn, ["z".to_owned()]).unwrap(),
            Requirement::new("j", Operator::Exists, []).unwrap(),
        ]);
        assert_eq!(selector, expected);
        assert!(Selector::parse_str("").unwrap().is_everything());
        assert!(Selector::parse_str("  ").unwrap().is_everything());
        assert_eq!(Selector::parse_str("a=").unwrap().to_string(), "a=");
    }

    #[test]
    fn string_syntax_errors_say_where() {
        let cases = [
            ("a=b,", "expected a label key, found the end"),
            ("a in ()", "the set of values must not be empty"),
            ("a in (x", "missing ')'"),
            ("a in x", "expected '('"),
            ("a>1", "not supported"),
            ("a b", "found \"b\""),
            ("a=b c", "expected ',' or the end"),
            (",", "expected a label key"),
        ];
        for (input, wanted) in cases {
            let err = Selector::parse_str(input).unwrap_err();
            assert!(
                matches!(err, SelectorError::Syntax { .. }),
                "{input:?}: {err}"
            );
            assert!(err.to_string().contains(wanted), "{input:?}: {err}");
        }
        let err = Selector::parse_str("a=b,c=d e").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid label selector \"a=b,c=d e\" at position 8: expected ',' or the end, found 'e'"
        );
        assert!(matches!(
            Selector::parse_str("bad key=x"),
            Err(SelectorError::Syntax { .. })
        ));
        assert!(matches!(
            Selector::parse_str("-a=x"),
            Err(SelectorError::InvalidKey { .. })
        ));
    }
}
