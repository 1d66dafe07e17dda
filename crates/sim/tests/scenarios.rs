//! Scenario files: every built-in one parses and runs its checks; bad files are clear errors.

use autoballoon_sim::scenario::BUILTIN;
use autoballoon_sim::{Scenario, SimError};

#[test]
fn every_builtin_scenario_parses_under_its_own_name() {
    for (name, text) in BUILTIN {
        let s = Scenario::parse(name, text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&s.name, name);
        assert!(s.calibration().is_ok());
        assert_eq!(Scenario::load(name).unwrap().name, *name);
    }
}

fn err(text: &str) -> String {
    match Scenario::parse("t", text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

const OK: &str = r#"
name = "t"
profile = "qemu-tcg"
duration_s = 10
[[vm]]
name = "a"
memory_gib = 1
"#;

#[test]
fn bad_scenarios_are_errors_that_name_the_problem() {
    assert!(Scenario::parse("t", OK).is_ok());
    assert!(err(&format!("{OK}\nbogus = 1\n")).contains("bogus"));
    assert!(err(&OK.replace("duration_s = 10", "duration_s = -1")).contains("duration_s"));
    assert!(err(&OK.replace("qemu-tcg", "nowhere")).contains("no profile \"nowhere\""));
    assert!(
        err(&format!("{OK}\n[[migration]]\nvm = \"zz\"\nfirst_s = 1\n"))
            .contains("no VM named \"zz\"")
    );
    assert!(err(&format!("{OK}\n[calibration]\nbandwidth_gib_s = 0\n")).contains("bandwidth_gib_s"));
    assert!(err(&format!("{OK}\n[calibration]\nwarp = 9\n")).contains("warp"));
    assert!(err(&format!("{OK}\n[policy]\nmin_mib = 0\n")).contains("min_mib"));
    assert!(err(&format!(
        "{OK}\n[[vm.program]]\nname = \"p\"\nrepeat = true\nsteps = [{{ kind = \"free\" }}]\n"
    ))
    .contains("must take time"));
    assert!(err(&format!("{OK}\n[[vm.program]]\nname = \"p\"\nsteps = [{{ kind = \"trace\", points = [[0, 1], [0, 2]] }}]\n")).contains("must rise"));
    assert!(err(&format!(
        "{OK}\n[[vm.program]]\nname = \"p\"\nsteps = [{{ kind = \"teleport\" }}]\n"
    ))
    .contains("teleport"));
    assert!(err("this is not toml").contains("scenario t"));
    assert!(err(&format!("{OK}\n[[vm.program]]\nname = \"p\"\njitter = 1.5\nsteps = [{{ kind = \"sleep\", s = 1 }}]\n")).contains("jitter"));
    assert!(err(&format!("{OK}\n[[vm.program]]\nname = \"p\"\nsteps = [{{ kind = \"files\", gib = 0.1, read_gib = 1, hot_share = 1.5 }}]\n")).contains("hot_share"));
    assert!(err(&format!("{OK}\n[[vm.program]]\nname = \"p\"\nsteps = [{{ kind = \"files\", gib = -1, read_gib = 1 }}]\n")).contains("files gib"));
    assert!(Scenario::parse(
        "t",
        &format!("{OK}\n[[vm.program]]\nname = \"p\"\nrepeat = true\nsteps = [{{ kind = \"files\", gib = 0.1, read_gib = 1 }}]\n")
    )
    .is_ok());
}

#[test]
fn an_unknown_name_lists_the_builtin_ones() {
    match Scenario::load("no-such-scenario") {
        Err(SimError::UnknownScenario(n, list)) => {
            assert_eq!(n, "no-such-scenario");
            assert!(list.contains("paper-spike"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn calibration_overrides_apply() {
    let s = Scenario::parse(
        "t",
        &format!("{OK}\n[calibration]\nbandwidth_gib_s = 2.5\n"),
    )
    .unwrap();
    assert_eq!(s.calibration().unwrap().bandwidth_gib_s, 2.5);
}
