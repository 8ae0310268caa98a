//! Typed tools: the schema derived from the argument type passes the broker's keyword subset
//! (nested structs, enums and options inlined), and the handler gets the arguments
//! deserialized.

use leo_app::{Call, JsonSchema, Reply, Tool};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, text_of};
use serde::Deserialize;
use serde_json::json;

use crate::support::{Running, builder};

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Unit {
    Metric,
    Imperial,
}

#[derive(Deserialize, JsonSchema)]
struct Place {
    /// The city's name.
    city: String,
    country: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct Args {
    place: Place,
    unit: Unit,
    #[serde(default)]
    days: Vec<u8>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_tool_registers_its_derived_schema_and_gets_its_arguments() {
    let schema = leo_app::schema_for::<Args>();
    let text = schema.to_string();
    assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
    assert_eq!(
        schema["properties"]["unit"]["enum"],
        json!(["metric", "imperial"])
    );

    let broker = Broker::start().await;
    let tool = Tool::typed(
        "weather",
        "The weather",
        |args: Args, _call: Call| async move {
            let unit = match args.unit {
                Unit::Metric => "C",
                Unit::Imperial => "F",
            };
            let country = args.place.country.unwrap_or_else(|| "?".into());
            Reply::text(format!(
                "{} ({country}) {unit} {:?}",
                args.place.city, args.days
            ))
        },
    );
    let app = Running::start(builder(&broker).group("g", [tool]).build().unwrap()).await;
    let agent = Agent::start(broker.home(), AgentOpts::native("claude")).await;
    let result = agent
        .call(
            "weather",
            json!({"place": {"city": "Paris"}, "unit": "metric", "days": [1, 2]}),
        )
        .await;
    assert_eq!(text_of(&result), "Paris (?) C [1, 2]");
    // The broker checks the arguments against the derived schema before the app sees them.
    let refused = agent
        .call("weather", json!({"place": {}, "unit": "kelvin"}))
        .await;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text_of(&refused).contains("invalid_arguments"),
        "{refused:?}"
    );
    app.stop().await.unwrap();
}
