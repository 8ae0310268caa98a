//! Tests for the input_schema subset check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use leo_protocol::schema::{MAX_SCHEMA_DEPTH, MAX_SCHEMAS, check_input_schema};
use serde_json::{Map, Value, json};

/// Checks one schema, given as JSON text, and compares the outcome with `expected`, which is the
/// full error Display or `None` for a valid schema. It returns a description of the mismatch.
fn check(schema_json: &str, expected: Option<&str>) -> Result<(), String> {
    let schema: Value = serde_json::from_str(schema_json)
        .map_err(|e| format!("case is not valid JSON ({e}): {schema_json}"))?;
    let got = check_input_schema(&schema).err().map(|e| e.to_string());
    if got.as_deref() == expected {
        Ok(())
    } else {
        Err(format!(
            "schema: {schema_json}\n  expected: {expected:?}\n  got:      {got:?}"
        ))
    }
}

/// Checks a schema built as a value, through the same comparison as [`check`].
fn check_value(schema: &Value, expected: Option<&str>) -> Result<(), String> {
    check(&schema.to_string(), expected)
}

/// Panics with every failing case, each named, if any case failed.
fn report(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn schema_subset_table() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        // Valid schemas.
        ("minimal root", r#"{"type":"object"}"#, None),
        (
            "every annotation keyword",
            r#"{"type":"object","$schema":"https://json-schema.org/draft/2020-12/schema",
                "$comment":"c","title":"t","description":"d","deprecated":false,
                "readOnly":true,"writeOnly":false,"default":{},"examples":[{"a":1}]}"#,
            None,
        ),
        (
            "string keywords",
            r#"{"type":"object","properties":{"s":{"type":"string","minLength":0,
                "maxLength":10,"pattern":"^[a-z]+$","format":"email"}}}"#,
            None,
        ),
        (
            "number keywords",
            r#"{"type":"object","properties":{"n":{"type":"number","minimum":-1.5,
                "maximum":10,"exclusiveMinimum":-2,"exclusiveMaximum":11,"multipleOf":0.5}}}"#,
            None,
        ),
        (
            "array keywords",
            r#"{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"},
                "minItems":1,"maxItems":5,"uniqueItems":true}}}"#,
            None,
        ),
        (
            "object keywords",
            r#"{"type":"object","properties":{"o":{"type":"object","minProperties":0,
                "maxProperties":3,"required":["x"],"properties":{"x":{}}}},
                "required":["o"],"additionalProperties":false}"#,
            None,
        ),
        (
            "additionalProperties true",
            r#"{"type":"object","additionalProperties":true}"#,
            None,
        ),
        (
            "additionalProperties schema",
            r#"{"type":"object","additionalProperties":{"type":"string"}}"#,
            None,
        ),
        (
            "composition keywords",
            r#"{"type":"object","properties":{"c":{"anyOf":[{"type":"string"},{"type":"null"}],
                "oneOf":[{"const":1},{"const":"x"}],"allOf":[{"description":"d"}]}}}"#,
            None,
        ),
        (
            "enum and const of any values",
            r#"{"type":"object","properties":{"e":{"enum":[1,"a",null,[1],{"$ref":"x"}]},
                "k":{"const":{"$ref":"not a keyword here"}}}}"#,
            None,
        ),
        (
            "type list",
            r#"{"type":"object","properties":{"t":{"type":["string","null"]}}}"#,
            None,
        ),
        (
            "every primitive type",
            r#"{"type":"object","properties":{"t":{"type":["null","boolean","object","array",
                "number","string","integer"]}}}"#,
            None,
        ),
        (
            "empty required and empty properties",
            r#"{"type":"object","properties":{},"required":[]}"#,
            None,
        ),
        (
            "required names need not be listed in properties",
            r#"{"type":"object","required":["ghost"]}"#,
            None,
        ),
        (
            "nested schema without type",
            r#"{"type":"object","properties":{"any":{}}}"#,
            None,
        ),
        // The root.
        (
            "root is an array",
            r#"[{"type":"object"}]"#,
            Some("at $: root schema must be a JSON object"),
        ),
        (
            "root is true",
            "true",
            Some("at $: root schema must be a JSON object"),
        ),
        (
            "root without type",
            r#"{"properties":{}}"#,
            Some(r#"at $: root schema must have "type": "object""#),
        ),
        (
            "root type string",
            r#"{"type":"string"}"#,
            Some(r#"at $.type: root schema must have "type": "object""#),
        ),
        (
            "root type list with only object",
            r#"{"type":["object"]}"#,
            Some(r#"at $.type: root schema must have "type": "object""#),
        ),
        // The type keyword.
        (
            "unknown type in a property",
            r#"{"type":"object","properties":{"ref":{"type":"bogus"}}}"#,
            Some(r#"at $.properties.ref.type: unknown type "bogus""#),
        ),
        (
            "unknown type in a list",
            r#"{"type":"object","properties":{"t":{"type":["string","bogus"]}}}"#,
            Some(r#"at $.properties.t.type[1]: unknown type "bogus""#),
        ),
        (
            "duplicate type in a list",
            r#"{"type":"object","properties":{"t":{"type":["string","string"]}}}"#,
            Some(r#"at $.properties.t.type[1]: duplicate type "string""#),
        ),
        (
            "empty type list",
            r#"{"type":"object","properties":{"t":{"type":[]}}}"#,
            Some("at $.properties.t.type: expected a type name or a non-empty array of type names"),
        ),
        (
            "type is a number",
            r#"{"type":"object","properties":{"t":{"type":1}}}"#,
            Some("at $.properties.t.type: expected a type name or a non-empty array of type names"),
        ),
        (
            "type list holds a non-string",
            r#"{"type":"object","properties":{"t":{"type":["string",null]}}}"#,
            Some("at $.properties.t.type[1]: expected a string"),
        ),
        // Unknown keywords.
        (
            "$ref",
            r##"{"type":"object","properties":{"a":{"$ref":"#/x"}}}"##,
            Some(r#"at $.properties.a.$ref: unknown keyword "$ref""#),
        ),
        (
            "patternProperties",
            r#"{"type":"object","patternProperties":{"^x":{}}}"#,
            Some(r#"at $.patternProperties: unknown keyword "patternProperties""#),
        ),
        (
            "$defs",
            r#"{"type":"object","$defs":{"a":{}}}"#,
            Some(r#"at $.$defs: unknown keyword "$defs""#),
        ),
        (
            "not",
            r#"{"type":"object","properties":{"a":{"not":{"type":"string"}}}}"#,
            Some(r#"at $.properties.a.not: unknown keyword "not""#),
        ),
        (
            "if then else reports the first key in order",
            r#"{"type":"object","if":{},"then":{},"else":{}}"#,
            Some(r#"at $.else: unknown keyword "else""#),
        ),
        (
            "dependentRequired",
            r#"{"type":"object","dependentRequired":{"a":["b"]}}"#,
            Some(r#"at $.dependentRequired: unknown keyword "dependentRequired""#),
        ),
        (
            "nullable from OpenAPI",
            r#"{"type":"object","properties":{"a":{"type":"string","nullable":true}}}"#,
            Some(r#"at $.properties.a.nullable: unknown keyword "nullable""#),
        ),
        (
            "unknown keyword with odd characters",
            r#"{"type":"object","x-a b":1}"#,
            Some(r#"at $["x-a b"]: unknown keyword "x-a b""#),
        ),
        // Tuple items and schema positions.
        (
            "tuple items",
            r#"{"type":"object","properties":{"t":{"type":"array","items":[{},{}]}}}"#,
            Some("at $.properties.t.items: tuple items are not supported"),
        ),
        (
            "boolean items",
            r#"{"type":"object","properties":{"t":{"type":"array","items":true}}}"#,
            Some("at $.properties.t.items: expected a schema object"),
        ),
        (
            "boolean property schema",
            r#"{"type":"object","properties":{"a":true}}"#,
            Some("at $.properties.a: expected a schema object"),
        ),
        (
            "boolean anyOf entry",
            r#"{"type":"object","properties":{"a":{"anyOf":[{},false]}}}"#,
            Some("at $.properties.a.anyOf[1]: expected a schema object"),
        ),
        (
            "empty oneOf",
            r#"{"type":"object","properties":{"a":{"oneOf":[]}}}"#,
            Some("at $.properties.a.oneOf: expected a non-empty array of schemas"),
        ),
        (
            "allOf is an object",
            r#"{"type":"object","allOf":{"type":"string"}}"#,
            Some("at $.allOf: expected a non-empty array of schemas"),
        ),
        (
            "additionalProperties is a string",
            r#"{"type":"object","additionalProperties":"no"}"#,
            Some("at $.additionalProperties: expected a boolean or a schema object"),
        ),
        (
            "properties is an array",
            r#"{"type":"object","properties":[{"type":"string"}]}"#,
            Some("at $.properties: expected an object"),
        ),
        // Nested paths.
        (
            "path through items and anyOf",
            r#"{"type":"object","properties":{"list":{"type":"array","items":{"anyOf":[
                {"type":"string"},{"type":"object","properties":{"x":{"type":"bogus"}}}]}}}}"#,
            Some(r#"at $.properties.list.items.anyOf[1].properties.x.type: unknown type "bogus""#),
        ),
        (
            "path through additionalProperties",
            r#"{"type":"object","additionalProperties":{"type":"object",
                "additionalProperties":{"minimum":"0"}}}"#,
            Some("at $.additionalProperties.additionalProperties.minimum: expected a number"),
        ),
        (
            "bracket-quoted property name",
            r#"{"type":"object","properties":{"a b":{"type":"bogus"}}}"#,
            Some(r#"at $.properties["a b"].type: unknown type "bogus""#),
        ),
        (
            "bracket-quoted property name with escapes",
            r#"{"type":"object","properties":{"q\"\\\n":{"title":1}}}"#,
            Some(r#"at $.properties["q\"\\\n"].title: expected a string"#),
        ),
        (
            "property name with a dollar is bracket-quoted",
            r#"{"type":"object","properties":{"$x":{"$ref":"y"}}}"#,
            Some(r#"at $.properties["$x"].$ref: unknown keyword "$ref""#),
        ),
        (
            "empty property name",
            r#"{"type":"object","properties":{"":{"format":false}}}"#,
            Some(r#"at $.properties[""].format: expected a string"#),
        ),
        (
            "property named like a keyword",
            r#"{"type":"object","properties":{"ref":{"type":"string"},"type":{"enum":[]}}}"#,
            Some("at $.properties.type.enum: expected a non-empty array"),
        ),
        // Wrong value types.
        (
            "required is a string",
            r#"{"type":"object","required":"a"}"#,
            Some("at $.required: expected an array of strings"),
        ),
        (
            "required holds a number",
            r#"{"type":"object","required":["a",1]}"#,
            Some("at $.required[1]: expected a string"),
        ),
        (
            "required repeats a name",
            r#"{"type":"object","required":["a","b","a"]}"#,
            Some(r#"at $.required[2]: duplicate property name "a""#),
        ),
        (
            "enum is not an array",
            r#"{"type":"object","properties":{"e":{"enum":"a"}}}"#,
            Some("at $.properties.e.enum: expected a non-empty array"),
        ),
        (
            "examples is not an array",
            r#"{"type":"object","examples":{"a":1}}"#,
            Some("at $.examples: expected an array"),
        ),
        (
            "description is a number",
            r#"{"type":"object","description":5}"#,
            Some("at $.description: expected a string"),
        ),
        (
            "pattern is null",
            r#"{"type":"object","properties":{"s":{"pattern":null}}}"#,
            Some("at $.properties.s.pattern: expected a string"),
        ),
        (
            "$schema is an object",
            r#"{"type":"object","$schema":{}}"#,
            Some("at $.$schema: expected a string"),
        ),
        (
            "$comment is an array",
            r#"{"type":"object","$comment":["c"]}"#,
            Some("at $.$comment: expected a string"),
        ),
        (
            "minimum is a string",
            r#"{"type":"object","properties":{"n":{"minimum":"1"}}}"#,
            Some("at $.properties.n.minimum: expected a number"),
        ),
        (
            "exclusiveMaximum is a boolean as in draft 4",
            r#"{"type":"object","properties":{"n":{"maximum":1,"exclusiveMaximum":true}}}"#,
            Some("at $.properties.n.exclusiveMaximum: expected a number"),
        ),
        (
            "multipleOf is zero",
            r#"{"type":"object","properties":{"n":{"multipleOf":0}}}"#,
            Some("at $.properties.n.multipleOf: expected a number greater than 0"),
        ),
        (
            "multipleOf is negative",
            r#"{"type":"object","properties":{"n":{"multipleOf":-2}}}"#,
            Some("at $.properties.n.multipleOf: expected a number greater than 0"),
        ),
        (
            "multipleOf is a string",
            r#"{"type":"object","properties":{"n":{"multipleOf":"2"}}}"#,
            Some("at $.properties.n.multipleOf: expected a number"),
        ),
        (
            "minLength is negative",
            r#"{"type":"object","properties":{"s":{"minLength":-1}}}"#,
            Some("at $.properties.s.minLength: expected a non-negative integer"),
        ),
        (
            "maxLength is 1.0",
            r#"{"type":"object","properties":{"s":{"maxLength":1.0}}}"#,
            Some("at $.properties.s.maxLength: expected a non-negative integer"),
        ),
        (
            "minItems is 1.5",
            r#"{"type":"object","properties":{"a":{"minItems":1.5}}}"#,
            Some("at $.properties.a.minItems: expected a non-negative integer"),
        ),
        (
            "maxItems is a string",
            r#"{"type":"object","properties":{"a":{"maxItems":"3"}}}"#,
            Some("at $.properties.a.maxItems: expected a non-negative integer"),
        ),
        (
            "minProperties is 1e2",
            r#"{"type":"object","minProperties":1e2}"#,
            Some("at $.minProperties: expected a non-negative integer"),
        ),
        (
            "maxProperties is null",
            r#"{"type":"object","maxProperties":null}"#,
            Some("at $.maxProperties: expected a non-negative integer"),
        ),
        (
            "uniqueItems is a string",
            r#"{"type":"object","properties":{"a":{"uniqueItems":"yes"}}}"#,
            Some("at $.properties.a.uniqueItems: expected a boolean"),
        ),
        (
            "deprecated is a number",
            r#"{"type":"object","deprecated":1}"#,
            Some("at $.deprecated: expected a boolean"),
        ),
        (
            "readOnly is null",
            r#"{"type":"object","readOnly":null}"#,
            Some("at $.readOnly: expected a boolean"),
        ),
        (
            "writeOnly is a string",
            r#"{"type":"object","writeOnly":"false"}"#,
            Some("at $.writeOnly: expected a boolean"),
        ),
        // Order of reporting.
        (
            "first error in key order wins",
            r#"{"type":"object","title":1,"description":2}"#,
            Some("at $.description: expected a string"),
        ),
    ];
    assert!(cases.len() >= 45, "only {} cases", cases.len());
    let failures = cases
        .iter()
        .filter_map(|(name, schema, expected)| {
            check(schema, *expected)
                .err()
                .map(|why| format!("case {name:?} failed:\n  {why}"))
        })
        .collect();
    report(failures);
}

/// Builds a schema nested `depth` levels deep through `properties.a`, the root at depth 1.
fn nested(depth: usize) -> Value {
    let mut schema = json!({"type": "string"});
    for _ in 1..depth {
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    schema
}

/// Builds a root schema that holds `count` schemas in all: itself and `count - 1` properties.
fn wide(count: usize) -> Value {
    let properties: Map<String, Value> = (0..count - 1)
        .map(|i| (format!("p{i:03}"), json!({})))
        .collect();
    json!({"type": "object", "properties": properties})
}

#[test]
fn schema_subset_limits() {
    let deep_path = format!("$.{}", vec!["properties.a"; MAX_SCHEMA_DEPTH].join("."));
    let deep_message = format!("at {deep_path}: schema nested deeper than 16 levels");
    // The same depth reached through items, anyOf and additionalProperties.
    let mut mixed = json!({});
    let mut mixed_path = String::from("$");
    for level in 1..MAX_SCHEMA_DEPTH {
        mixed = match level % 3 {
            0 => json!({"items": mixed}),
            1 => json!({"anyOf": [mixed]}),
            _ => json!({"additionalProperties": mixed}),
        };
        mixed_path.push_str(match (MAX_SCHEMA_DEPTH - level) % 3 {
            0 => ".items",
            1 => ".anyOf[0]",
            _ => ".additionalProperties",
        });
    }
    let mut mixed_ok = mixed.clone();
    mixed_ok["type"] = json!("object");
    let mixed_deep = json!({"type": "object", "properties": {"a": mixed}});
    let mixed_deep_message = format!(
        "at $.properties.a{}: schema nested deeper than 16 levels",
        &mixed_path[1..]
    );

    let cases: Vec<(&str, Value, Option<String>)> = vec![
        ("depth 16", nested(MAX_SCHEMA_DEPTH), None),
        ("depth 17", nested(MAX_SCHEMA_DEPTH + 1), Some(deep_message)),
        ("mixed depth 16", mixed_ok, None),
        ("mixed depth 17", mixed_deep, Some(mixed_deep_message)),
        ("512 schemas", wide(MAX_SCHEMAS), None),
        (
            "513 schemas",
            wide(MAX_SCHEMAS + 1),
            Some("at $.properties.p511: more than 512 schemas".to_owned()),
        ),
        (
            "boolean additionalProperties is not counted",
            {
                let mut schema = wide(MAX_SCHEMAS);
                schema["additionalProperties"] = json!(false);
                schema
            },
            None,
        ),
    ];
    let failures = cases
        .iter()
        .filter_map(|(name, schema, expected)| {
            check_value(schema, expected.as_deref())
                .err()
                .map(|why| format!("case {name:?} failed:\n  {why}"))
        })
        .collect();
    report(failures);
}

/// Inlines `schema` and returns the result or the error's Display.
fn inlined(schema: &Value) -> Result<Value, String> {
    leo_protocol::schema::inline_input_schema(schema).map_err(|e| e.to_string())
}

#[test]
fn local_refs_are_inlined_nested_and_with_siblings() {
    let schema = json!({
        "type": "object",
        "$defs": {
            "point": {"type": "object", "properties": {"x": {"$ref": "#/$defs/coord"}}},
            "coord": {"type": "number", "minimum": 0},
            "a/b": {"type": "string"}
        },
        "definitions": {"old": {"type": "boolean"}},
        "properties": {
            "p": {"$ref": "#/$defs/point"},
            "q": {"$ref": "#/$defs/point", "description": "a point"},
            "s": {"$ref": "#/$defs/a~1b"},
            "o": {"$ref": "#/definitions/old"},
            "y": {"$ref": "#/$defs/point/properties/x"},
            "d": {"const": {"$ref": "#/nowhere"}}
        }
    });
    let point = json!({"type": "object", "properties": {"x": {"type": "number", "minimum": 0}}});
    // `$defs` and `definitions` stay, each definition inlined, beside the inlined properties.
    let want = json!({
        "type": "object",
        "$defs": {
            "point": point,
            "coord": {"type": "number", "minimum": 0},
            "a/b": {"type": "string"}
        },
        "definitions": {"old": {"type": "boolean"}},
        "properties": {
            "p": point,
            "q": {"description": "a point", "allOf": [point]},
            "s": {"type": "string"},
            "o": {"type": "boolean"},
            "y": {"type": "number", "minimum": 0},
            "d": {"const": {"$ref": "#/nowhere"}}
        }
    });
    let got = inlined(&schema).unwrap();
    assert_eq!(got, want);
    assert!(!got.to_string().contains("\"$ref\":\"#/$defs"), "{got}");
    // The inlined form passes the check again (its kept definitions hold no ref), and
    // inlining it once more changes nothing.
    assert_eq!(inlined(&got), Ok(want));
    // An unused definition is kept too, and a definition that uses itself is a cycle at its
    // own ref, even when no property uses it.
    let unused = json!({"type": "object", "$defs": {"u": {"type": "string"}}});
    assert_eq!(inlined(&unused), Ok(unused.clone()));
    let selfish = json!({"type": "object", "$defs": {"a": {"items": {"$ref": "#/$defs/a"}}}});
    assert_eq!(
        inlined(&selfish),
        Err(r##"at $.$defs.a.items.$ref: $ref "#/$defs/a" is a cycle"##.to_owned())
    );
    // The strict check used for output schemas still refuses `$defs`.
    assert_eq!(
        check_input_schema(&unused).map_err(|e| e.to_string()),
        Err(r#"at $.$defs: unknown keyword "$defs""#.to_owned())
    );
    // Without refs the schema is returned as it was.
    let plain = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    assert_eq!(inlined(&plain), Ok(plain.clone()));
}

#[test]
fn bad_refs_are_refused_with_a_path() {
    let cases = [
        (
            json!({"type": "object", "$defs": {"a": {"properties": {"b": {"$ref": "#/$defs/a"}}}},
                   "properties": {"x": {"$ref": "#/$defs/a"}}}),
            r##"at $.properties.x.$ref.properties.b.$ref: $ref "#/$defs/a" is a cycle"##,
        ),
        (
            json!({"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}),
            r##"at $.properties.x.$ref: $ref "https://example.com/s.json" is not local; only refs like "#/$defs/Name" are supported"##,
        ),
        (
            json!({"type": "object", "properties": {"x": {"$ref": "#"}}}),
            r##"at $.properties.x.$ref: $ref "#" points at the whole schema, a cycle"##,
        ),
        (
            json!({"type": "object", "properties": {"x": {"$ref": "#/properties/y"}}}),
            r##"at $.properties.x.$ref: $ref "#/properties/y" must point into "#/$defs/" or "#/definitions/""##,
        ),
        (
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}),
            r##"at $.properties.x.$ref: $ref "#/$defs/missing" names no definition"##,
        ),
        (
            json!({"type": "object", "$defs": {"a": {"type": "bogus"}}}),
            r#"at $.$defs.a.type: unknown type "bogus""#,
        ),
        (
            json!({"type": "object", "properties": {"x": {"$defs": {}}}}),
            r#"at $.properties.x.$defs: unknown keyword "$defs""#,
        ),
    ];
    let failures = cases
        .iter()
        .filter_map(|(schema, want)| {
            let got = inlined(schema).err();
            (got.as_deref() != Some(*want))
                .then(|| format!("{schema}\n  want {want}\n  got  {got:?}"))
        })
        .collect();
    report(failures);
}

#[test]
fn ref_expansion_is_bounded() {
    // Each definition uses the previous one eight times: 8^8 copies if it were built.
    let mut defs = Map::new();
    defs.insert("d0".into(), json!({"type": "string"}));
    for i in 1..=8 {
        let prev = format!("#/$defs/d{}", i - 1);
        let props: Map<String, Value> = (0..8)
            .map(|k| (format!("p{k}"), json!({"$ref": prev})))
            .collect();
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": props}),
        );
    }
    let schema =
        json!({"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d8"}}});
    let err = inlined(&schema).unwrap_err();
    assert!(
        err.ends_with(&format!(
            "more than {MAX_SCHEMAS} schemas once refs are inlined"
        )),
        "{err}"
    );
    // A chain of refs deeper than the depth limit once inlined.
    let mut defs = Map::new();
    defs.insert("c0".into(), json!({"type": "string"}));
    for i in 1..=MAX_SCHEMA_DEPTH {
        let prev = format!("#/$defs/c{}", i - 1);
        defs.insert(
            format!("c{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": prev}}}),
        );
    }
    let last = format!("#/$defs/c{MAX_SCHEMA_DEPTH}");
    let schema = json!({"type": "object", "$defs": defs, "properties": {"x": {"$ref": last}}});
    let err = inlined(&schema).unwrap_err();
    assert!(err.contains("nested deeper than"), "{err}");
}

#[test]
fn tool_check_refuses_a_schema_too_big_once_inlined_and_stores_the_inlined_form() {
    use leo_protocol::limits::MAX_SCHEMA_BYTES;
    let big = "x".repeat(MAX_SCHEMA_BYTES / 8);
    let props: Map<String, Value> = (0..10)
        .map(|i| (format!("p{i}"), json!({"$ref": "#/$defs/big"})))
        .collect();
    let schema = json!({"type": "object", "$defs": {"big": {"type": "string", "description": big}},
                        "properties": props});
    let tool = |schema: Value| {
        serde_json::from_value::<leo_protocol::tool::ToolDef>(
            json!({"name": "t", "description": "d", "input_schema": schema}),
        )
        .unwrap()
    };
    let err = tool(schema).check("$.tools[0]").unwrap_err().message;
    assert!(
        err.starts_with("at $.tools[0].input_schema: input_schema has "),
        "{err}"
    );
    assert!(err.contains("once refs are inlined"), "{err}");
    let mut small = tool(json!({"type": "object", "$defs": {"s": {"type": "string"}},
                                "properties": {"a": {"$ref": "#/$defs/s"}}}));
    small.check("$.tools[0]").unwrap();
    assert_eq!(
        small.input_schema,
        json!({"type": "object", "$defs": {"s": {"type": "string"}},
               "properties": {"a": {"type": "string"}}})
    );
}
