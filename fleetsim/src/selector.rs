//! Label and field selectors in their query-string syntax.
//!
//! Label selectors support the equality-based (`a=b`, `a==b`, `a!=b`) and set-based
//! (`a in (x,y)`, `a notin (x)`, `a`, `!a`) requirements plus `a>1` / `a<1`, separated by
//! commas, with the key and value syntax rules of Kubernetes. Field selectors support
//! `metadata.name` and `metadata.namespace` with `=`, `==` and `!=`; any other field is
//! rejected as the apiserver rejects field labels a resource does not support.

/// One parsed requirement.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub fn parse(input: &str) -> Result<Self, String> {
        let mut parser = Parser {
            chars: input.chars().collect(),
            pos: 0,
        };
        let mut requirements = Vec::new();
        parser.skip_spaces();
        if parser.at_end() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(parser.requirement()?);
            parser.skip_spaces();
            if parser.at_end() {
                break;
            }
            if !parser.eat(',') {
                return Err(format!(
                    "unable to parse requirement: found '{}', expected: ','",
                    parser.rest()
                ));
            }
        }
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether labels given as (key, value) pairs match.
    pub fn matches(&self, labels: &[(Box<str>, Box<str>)]) -> bool {
        let get = |key: &str| labels.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v);
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|w| w == v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.iter().any(|w| w == v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
            Requirement::GreaterThan(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn rest(&self) -> String {
        self.chars[self.pos.min(self.chars.len())..]
            .iter()
            .collect()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// A run of characters that can form a key or a value.
    fn word(&mut self) -> String {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        self.skip_spaces();
        if self.eat('!') {
            self.skip_spaces();
            let key = self.word();
            validate_key(&key)?;
            return Ok(Requirement::DoesNotExist(key));
        }
        let key = self.word();
        validate_key(&key)?;
        self.skip_spaces();
        match self.peek() {
            None | Some(',') => Ok(Requirement::Exists(key)),
            Some('=') => {
                self.pos += 1;
                self.eat('=');
                let value = self.value()?;
                Ok(Requirement::Equals(key, value))
            }
            Some('!') => {
                self.pos += 1;
                if !self.eat('=') {
                    return Err(format!(
                        "unable to parse requirement: expected '=' after '!' for key {key:?}"
                    ));
                }
                let value = self.value()?;
                Ok(Requirement::NotEquals(key, value))
            }
            Some(op @ ('>' | '<')) => {
                self.pos += 1;
                let value = self.value()?;
                let number = value.parse::<i64>().map_err(|_| {
                    format!("unable to parse requirement: for 'gt', 'lt' operators, the value must be an integer: {value:?}")
                })?;
                Ok(if op == '>' {
                    Requirement::GreaterThan(key, number)
                } else {
                    Requirement::LessThan(key, number)
                })
            }
            Some(_) => {
                let operator = self.word();
                let values = match operator.as_str() {
                    "in" | "notin" => self.value_set()?,
                    other => {
                        return Err(format!(
                            "unable to parse requirement: found '{other}', expected: in, notin, =, ==, !=, gt, lt"
                        ));
                    }
                };
                Ok(if operator == "in" {
                    Requirement::In(key, values)
                } else {
                    Requirement::NotIn(key, values)
                })
            }
        }
    }

    fn value(&mut self) -> Result<String, String> {
        self.skip_spaces();
        let value = self.word();
        validate_value(&value)?;
        Ok(value)
    }

    fn value_set(&mut self) -> Result<Vec<String>, String> {
        self.skip_spaces();
        if !self.eat('(') {
            return Err("unable to parse requirement: found '', expected: '('".to_string());
        }
        let mut values = Vec::new();
        loop {
            let value = self.value()?;
            values.push(value);
            self.skip_spaces();
            if self.eat(')') {
                break;
            }
            if !self.eat(',') {
                return Err(format!(
                    "unable to parse requirement: found '{}', expected: ',', ')'",
                    self.rest()
                ));
            }
        }
        Ok(values)
    }
}

fn is_name_part(part: &str) -> bool {
    let chars: Vec<char> = part.chars().collect();
    !chars.is_empty()
        && chars.len() <= 63
        && chars[0].is_ascii_alphanumeric()
        && chars[chars.len() - 1].is_ascii_alphanumeric()
        && chars
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

pub(crate) fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(crate::ids::is_dns_subdomain);
    if !prefix_ok || !is_name_part(name) {
        return Err(format!(
            "unable to parse requirement: invalid label key {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

pub(crate) fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name_part(value) {
        return Ok(());
    }
    Err(format!(
        "unable to parse requirement: invalid label value: {value:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
    ))
}

/// A field selector restricted to `metadata.name` and `metadata.namespace`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector {
    /// (field, wanted value, equal?)
    terms: Vec<(String, String, bool)>,
}

impl FieldSelector {
    pub fn parse(input: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for raw in input.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, value, equal) = if let Some((f, v)) = raw.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = raw.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = raw.split_once('=') {
                (f, v, true)
            } else {
                return Err(format!(
                    "invalid selector: '{input}'; can't understand '{raw}'"
                ));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), value.trim().to_string(), equal));
        }
        Ok(FieldSelector { terms })
    }

    pub fn matches(&self, namespace: &str, name: &str) -> bool {
        self.terms.iter().all(|(field, value, equal)| {
            let actual = if field == "metadata.name" {
                name
            } else {
                namespace
            };
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(Box<str>, Box<str>)> {
        pairs
            .iter()
            .map(|(k, v)| (Box::from(*k), Box::from(*v)))
            .collect()
    }

    #[test]
    fn equality_and_set_based_requirements() {
        let selector = LabelSelector::parse("app=web, tier in (front,back),!legacy,env!=prod")
            .expect("valid selector");
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "front")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!selector.matches(&labels(&[
            ("app", "web"),
            ("tier", "front"),
            ("legacy", "")
        ])));
        assert!(!selector.matches(&labels(&[
            ("app", "web"),
            ("tier", "back"),
            ("env", "prod")
        ])));
        let exists =
            LabelSelector::parse("example.com/team,size>2,version notin (1)").expect("valid");
        assert!(exists.matches(&labels(&[("example.com/team", "a"), ("size", "3")])));
        assert!(!exists.matches(&labels(&[("example.com/team", "a"), ("size", "2")])));
        assert!(LabelSelector::parse("").expect("empty").is_empty());
        assert!(LabelSelector::parse("a==b").is_ok());
    }

    #[test]
    fn rejects_bad_syntax() {
        for bad in [
            "app=(",
            "app in a,b",
            "=x",
            "app==x y",
            "a in (b",
            "-a=b",
            "a>x",
            "a!x",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn field_selectors() {
        let selector = FieldSelector::parse("metadata.name=web,metadata.namespace!=kube-system")
            .expect("valid");
        assert!(selector.matches("default", "web"));
        assert!(!selector.matches("kube-system", "web"));
        assert!(FieldSelector::parse("spec.nodeName=a").is_err());
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
