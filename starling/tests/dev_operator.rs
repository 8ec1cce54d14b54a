//! `starling dev --mode operator`: the one-machine demo with its specs in a management cluster
//! (one more fleetsim cluster). The binary runs both rollouts to the end and exits 0 only when
//! every check holds, the SyncGroup's status on the management cluster included; its output
//! tells the user where the management cluster's kubeconfig is.

mod harness;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::{binary, serial};

/// Reads a child's pipe to the end on a thread.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

#[test]
fn dev_in_operator_mode_converges_and_names_the_management_kubeconfig() {
    let _serial = serial();
    let started = Instant::now();
    let mut dev = Command::new(binary())
        .args(["dev", "--mode", "operator", "--clusters", "10"])
        .args(["--exit-when-converged", "--port", "0"])
        .args([
            "--ready-delay",
            "100ms",
            "--latency",
            "1ms",
            "--timeout",
            "60s",
        ])
        .env("STARLING_LOG", "warn,openraft=error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starling dev starts");
    let stdout = drain(dev.stdout.take().expect("piped stdout"));
    let stderr = drain(dev.stderr.take().expect("piped stderr"));
    let deadline = started + Duration::from_secs(150);
    let status = loop {
        if let Some(status) = dev.try_wait().expect("wait for starling dev") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = dev.kill();
            let _ = dev.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    let output = format!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let status = status.unwrap_or_else(|| panic!("starling dev did not exit in time\n{output}"));
    eprintln!(
        "starling dev --mode operator ran {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert!(status.success(), "starling dev failed: {status}\n{output}");

    // The progress output names the kubeconfig and how to use it; the summary repeats it.
    let kubeconfig = stderr
        .lines()
        .find_map(|line| line.trim().strip_prefix("kubeconfig: "))
        .unwrap_or_else(|| panic!("no kubeconfig in the progress output\n{output}"));
    assert!(
        kubeconfig.ends_with("management.kubeconfig"),
        "{kubeconfig}"
    );
    assert!(
        stderr.contains(&format!("KUBECONFIG={kubeconfig} kubectl get syncgroups")),
        "{output}"
    );
    assert!(
        stdout.contains(&format!("kubeconfig {kubeconfig}")),
        "{output}"
    );
    // The management cluster is no target, and its status check ran and held.
    assert!(
        stdout.contains("[ok] status on the management cluster"),
        "{output}"
    );
    assert_eq!(
        stderr.matches(" to 10 clusters in ").count(),
        2,
        "two rollouts over the 10 targets\n{output}"
    );
    assert!(stdout.contains("[ok] every cluster converged"), "{output}");
    assert!(!stdout.contains("FAILED"), "{output}");
}
