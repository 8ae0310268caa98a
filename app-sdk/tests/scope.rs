//! Who sees which tool: a group the app offers to chosen agents only (`Builder::group_for`).

use leo_app::{Call, Reply, Tool};
use leo_testkit::Broker;
use leo_testkit::agent::{Agent, AgentOpts, error_text, text_of};
use serde_json::json;

use crate::support::{Running, builder};

fn tool(name: &'static str) -> Tool {
    Tool::new(name, "Says which tool ran", move |_call: Call| async move {
        Reply::text(name)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_for_chosen_agents_reaches_them_and_no_other() {
    let broker = Broker::start().await;
    let app = builder(&broker)
        .group_for("deploy", ["rocket", "ci-*"], [tool("deploy_now")])
        .group("open", [tool("open_tool")])
        .build()
        .unwrap();
    let app = Running::start(app).await;

    let ci = Agent::start(broker.home(), AgentOpts::native("ci-7")).await;
    assert_eq!(
        ci.tool_names_without_messages().await,
        ["deploy_now", "open_tool"]
    );
    assert_eq!(
        text_of(&ci.call("deploy_now", json!({})).await),
        "deploy_now"
    );

    let scout = Agent::start(broker.home(), AgentOpts::native("scout")).await;
    assert_eq!(scout.tool_names_without_messages().await, ["open_tool"]);
    assert_eq!(
        text_of(&scout.call("open_tool", json!({})).await),
        "open_tool"
    );
    let refused = error_text(&scout.call("deploy_now", json!({})).await);
    assert!(refused.starts_with("no_client: "), "{refused}");
    app.stop().await.unwrap();
}

#[test]
fn bad_agent_lists_are_refused_when_the_app_is_built() {
    let none: [&str; 0] = [];
    let err = leo_app::App::builder()
        .group_for("deploy", none, [tool("deploy_now")])
        .build()
        .err()
        .expect("an empty list must be refused");
    assert!(err.to_string().contains("$.agents"), "{err}");
    let err = leo_app::App::builder()
        .group_for("deploy", ["ci/*"], [tool("deploy_now")])
        .build()
        .err()
        .expect("a bad pattern must be refused");
    assert!(err.to_string().contains("$.agents[0]"), "{err}");
}
