//! Replicas as containers of the image, started with the arguments the Helm chart gives its
//! pods: the chart rendered by Helm's engine (`starling render` on the host), its StatefulSet's
//! args, env, mounts, ports, probes and securityContext turned into `docker run` flags. One
//! user-defined bridge network stands for the headless Service: every container has its pod's
//! DNS name (`starling-N.starling-headless.<namespace>.svc.cluster.local`) as a network alias.
//!
//! The test's servers (fleetsim, `git daemon`) listen on the host's loopback only. A container
//! reaches them at the same loopback addresses in its own network namespace, where the test
//! opens a listener for each port (`setns(2)` into the container's namespace from a thread of
//! its own, as a sidecar in a pod would listen) and forwards every connection to the host's
//! loopback. Kubeconfigs and git URLs are then the same inside and outside, and nothing
//! listens on the bridge's host address. The test reaches the replicas through ports published
//! on the host's loopback (`-p 127.0.0.1:P:7400`). This needs root, as Docker itself does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Debian's client; the daemon is `DOCKER_HOST`'s (scripts/test-image starts one).
pub const DOCKER: &str = "/usr/bin/docker";

/// Runs `docker ARGS`: its standard output, or a message with its standard error.
pub fn docker(args: &[&str]) -> Result<String, String> {
    let output = Command::new(DOCKER)
        .args(args)
        .output()
        .map_err(|error| format!("cannot run {DOCKER}: {error}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(format!(
            "docker {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The image under test (`STARLING_IMAGE`), checked to exist on a daemon that answers.
pub fn image() -> String {
    let image = std::env::var("STARLING_IMAGE").unwrap_or_default();
    assert!(
        !image.is_empty(),
        "STARLING_IMAGE names no image: scripts/test-image builds it and runs this test"
    );
    if let Err(error) = docker(&["image", "inspect", "--format", "{{.Id}}", &image]) {
        panic!("the image {image} is not on the daemon at DOCKER_HOST: {error}");
    }
    image
}

/// What the chart's StatefulSet says about its container.
#[derive(Clone, Debug)]
pub struct PodSpec {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Mount path by volume name.
    pub mounts: BTreeMap<String, String>,
    /// Container port by port name.
    pub ports: BTreeMap<String, u16>,
    pub liveness_path: String,
    pub readiness_path: String,
    pub user: String,
    pub read_only_root: bool,
    pub grace_seconds: u64,
    pub replicas: u64,
    pub first_ordinal: u64,
    pub statefulset: String,
}

impl PodSpec {
    /// Renders `chart_dir` with Helm's engine (the host binary's `starling render`) and the
    /// given values file, and reads its StatefulSet.
    pub fn from_chart(binary: &Path, chart_dir: &Path, values: &Path, namespace: &str) -> PodSpec {
        // The chart alone, so that the render's copy of the source is small.
        let source = tempfile::tempdir().expect("temp dir");
        copy_tree(chart_dir, &source.path().join("chart"));
        let output = Command::new(binary)
            .args(["render", "--source-dir"])
            .arg(source.path())
            .args([
                "--path",
                "chart",
                "--renderer",
                "helm",
                "--release-name",
                "starling",
            ])
            .args(["--namespace", namespace, "--values"])
            .arg(values)
            .output()
            .expect("starling render runs");
        assert!(
            output.status.success(),
            "the chart does not render: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        let statefulset = serde_yaml_ng::Deserializer::from_str(&text)
            .filter_map(|document| <Value as serde::Deserialize>::deserialize(document).ok())
            .find(|object| object["kind"] == "StatefulSet")
            .expect("the chart renders a StatefulSet");
        let spec = &statefulset["spec"];
        let pod = &spec["template"]["spec"];
        let container = &pod["containers"][0];
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let env = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| Some((text(&v["name"]), v.get("value").map(text)?)))
            .collect();
        let list = |value: &Value, key: &str, field: &str| -> BTreeMap<String, Value> {
            value[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|item| (text(&item["name"]), item[field].clone()))
                .collect()
        };
        let security = &container["securityContext"];
        PodSpec {
            args: container["args"]
                .as_array()
                .expect("the container has args")
                .iter()
                .map(text)
                .collect(),
            env,
            mounts: list(container, "volumeMounts", "mountPath")
                .into_iter()
                .map(|(name, path)| (name, text(&path)))
                .collect(),
            ports: list(container, "ports", "containerPort")
                .into_iter()
                .map(|(name, port)| (name, port.as_u64().unwrap_or_default() as u16))
                .collect(),
            liveness_path: probe_path(&container["livenessProbe"]),
            readiness_path: probe_path(&container["readinessProbe"]),
            user: format!("{}:{}", security["runAsUser"], security["runAsGroup"]),
            read_only_root: security["readOnlyRootFilesystem"] == true,
            grace_seconds: pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30),
            replicas: spec["replicas"].as_u64().expect("replicas"),
            first_ordinal: spec["ordinals"]["start"].as_u64().unwrap_or(0),
            statefulset: text(&statefulset["metadata"]["name"]),
        }
    }

    /// The pod name of replica `id`.
    pub fn pod(&self, id: u64) -> String {
        format!("{}-{id}", self.statefulset)
    }

    /// The args of pod `id` with `$(VAR)` expanded from its env, as the kubelet does.
    pub fn args_of(&self, id: u64) -> Vec<String> {
        let env = self.env_of(id);
        self.args
            .iter()
            .map(|arg| {
                env.iter().fold(arg.clone(), |arg, (name, value)| {
                    arg.replace(&format!("$({name})"), value)
                })
            })
            .collect()
    }

    /// The env of pod `id`: the chart's values, and STARLING_ID from the pod's name.
    pub fn env_of(&self, id: u64) -> Vec<(String, String)> {
        let mut env = vec![("STARLING_ID".to_owned(), self.pod(id))];
        env.extend(self.env.iter().cloned());
        env
    }

    /// The value of flag `--name=` in pod `id`'s args.
    pub fn flag(&self, id: u64, name: &str) -> String {
        let prefix = format!("--{name}=");
        self.args_of(id)
            .into_iter()
            .find_map(|arg| arg.strip_prefix(&prefix).map(str::to_owned))
            .unwrap_or_else(|| panic!("the chart gives no {prefix}"))
    }

    /// The DNS name pod `id` advertises (`--advertise` without its port).
    pub fn host_name(&self, id: u64) -> String {
        let advertise = self.flag(id, "advertise");
        advertise
            .rsplit_once(':')
            .map_or(advertise.clone(), |(host, _)| host.to_owned())
    }
}

fn probe_path(probe: &Value) -> String {
    assert_eq!(
        probe["httpGet"]["scheme"], "HTTPS",
        "probes use HTTPS: {probe}"
    );
    probe["httpGet"]["path"]
        .as_str()
        .expect("a probe path")
        .to_owned()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read the chart") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Listeners in a container's network namespace on its loopback, each forwarding to the same
/// port on the host's loopback; stopped when dropped.
pub struct Sidecar {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Sidecar {
    /// Opens `ports` on the loopback of the network namespace of process `pid`.
    pub fn start(pid: u32, ports: &[u16]) -> Result<Sidecar, String> {
        use std::os::fd::AsRawFd as _;
        let namespace = std::fs::File::open(format!("/proc/{pid}/ns/net"))
            .map_err(|error| format!("cannot open the network namespace of {pid}: {error}"))?;
        let wanted = ports.to_vec();
        // setns changes only the calling thread's namespace: a thread of its own, which ends
        // right after binding (the sockets stay in the namespace they were made in).
        let bound = std::thread::spawn(move || {
            // SAFETY: a valid descriptor of a network namespace, and a namespace type.
            if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(format!(
                    "setns into the container's network namespace: {} (run as root)",
                    std::io::Error::last_os_error()
                ));
            }
            wanted
                .iter()
                .map(|port| {
                    let listener =
                        std::net::TcpListener::bind(("127.0.0.1", *port)).map_err(|error| {
                            format!("bind 127.0.0.1:{port} in the container: {error}")
                        })?;
                    listener
                        .set_nonblocking(true)
                        .map_err(|error| error.to_string())?;
                    Ok((*port, listener))
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .join()
        .map_err(|_| "the sidecar thread panicked".to_owned())??;
        let mut tasks = Vec::new();
        for (port, listener) in bound {
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            tasks.push(tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        if let Ok(mut outbound) =
                            tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                        {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                }
            }));
        }
        Ok(Sidecar { tasks })
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One replica's container.
pub struct Container {
    pub id: u64,
    pub name: String,
    pub volume: String,
    /// The published gRPC and HTTPS ports on the host's loopback.
    pub grpc: String,
    pub http: String,
    sidecar: Option<Sidecar>,
    running: bool,
}

/// The replica group's containers, network and volumes; all removed when dropped (with the
/// containers' last log lines printed when the test is failing).
pub struct Replicas {
    pub spec: PodSpec,
    pub image: String,
    pub network: String,
    pub containers: BTreeMap<u64, Container>,
    tls_dir: PathBuf,
    host_ports: Vec<u16>,
}

impl Replicas {
    /// Creates the network and lays out one container per replica (none started).
    pub fn prepare(
        spec: PodSpec,
        image: String,
        tls_dir: &Path,
        host_ports: Vec<u16>,
        free_port: impl Fn() -> u16,
    ) -> Replicas {
        static GROUPS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let group = GROUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("starling-test-{}-{group}", std::process::id());
        let network = format!("{prefix}-net");
        docker(&["network", "create", "--driver", "bridge", &network]).expect("network created");
        let containers = (spec.first_ordinal..spec.first_ordinal + spec.replicas)
            .map(|id| {
                let container = Container {
                    id,
                    name: format!("{prefix}-{id}"),
                    volume: format!("{prefix}-data-{id}"),
                    grpc: format!("127.0.0.1:{}", free_port()),
                    http: format!("127.0.0.1:{}", free_port()),
                    sidecar: None,
                    running: false,
                };
                (id, container)
            })
            .collect();
        Replicas {
            spec,
            image,
            network,
            containers,
            tls_dir: tls_dir.to_path_buf(),
            host_ports,
        }
    }

    /// `docker run` of replica `id` as the chart runs its pod, then its sidecar.
    pub fn run(&mut self, id: u64) {
        let spec = &self.spec;
        let container = &self.containers[&id];
        let mut args: Vec<String> = ["run", "--detach", "--name", &container.name]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(["--network".into(), self.network.clone()]);
        args.extend(["--network-alias".into(), spec.host_name(id)]);
        args.extend(["--hostname".into(), spec.pod(id)]);
        args.extend(["--user".into(), spec.user.clone()]);
        if spec.read_only_root {
            args.push("--read-only".into());
        }
        args.extend(["--cap-drop", "ALL", "--security-opt", "no-new-privileges"].map(String::from));
        for (volume, path) in &spec.mounts {
            let mount = match volume.as_str() {
                "data" => format!("--volume={}:{path}", container.volume),
                "tmp" => format!("--tmpfs={path}:size=64m"),
                "tls" => format!("--volume={}:{path}:ro", self.tls_dir.display()),
                other => panic!("the chart mounts a volume this test does not know: {other}"),
            };
            args.push(mount);
        }
        for (name, host) in [("grpc", &container.grpc), ("http", &container.http)] {
            let port = spec
                .ports
                .get(name)
                .unwrap_or_else(|| panic!("no {name} port"));
            args.push(format!("--publish={host}:{port}"));
        }
        for (name, value) in spec.env_of(id) {
            args.push(format!("--env={name}={value}"));
        }
        args.push(self.image.clone());
        args.extend(spec.args_of(id));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&args).unwrap_or_else(|error| panic!("replica {id} does not start: {error}"));
        self.attach(id);
    }

    /// Opens the sidecar of a running container.
    fn attach(&mut self, id: u64) {
        let name = self.containers[&id].name.clone();
        let pid: u32 = docker(&["inspect", "--format", "{{.State.Pid}}", &name])
            .expect("inspect")
            .parse()
            .expect("a pid");
        let sidecar = Sidecar::start(pid, &self.host_ports)
            .unwrap_or_else(|error| panic!("no sidecar for {name}: {error}"));
        let container = self.containers.get_mut(&id).expect("known");
        container.sidecar = Some(sidecar);
        container.running = true;
    }

    /// `docker kill` (SIGKILL) of replica `id`.
    pub fn kill(&mut self, id: u64) {
        let name = self.containers[&id].name.clone();
        docker(&["kill", &name]).expect("docker kill");
        self.detached(id);
    }

    /// `docker start` of replica `id` (its container and volume kept), then its sidecar.
    pub fn start_again(&mut self, id: u64) {
        let name = self.containers[&id].name.clone();
        docker(&["start", &name]).expect("docker start");
        self.attach(id);
    }

    /// `docker stop` (SIGTERM, then SIGKILL after the pod's grace period) of replica `id`:
    /// how long it took and the container's exit code.
    pub fn stop(&mut self, id: u64) -> (Duration, i64) {
        let name = self.containers[&id].name.clone();
        let started = Instant::now();
        let grace = self.spec.grace_seconds.to_string();
        docker(&["stop", "--time", &grace, &name]).expect("docker stop");
        let took = started.elapsed();
        self.detached(id);
        let code = docker(&["inspect", "--format", "{{.State.ExitCode}}", &name])
            .expect("inspect")
            .parse()
            .expect("an exit code");
        (took, code)
    }

    fn detached(&mut self, id: u64) {
        let container = self.containers.get_mut(&id).expect("known");
        container.sidecar = None;
        container.running = false;
    }

    pub fn running(&self) -> impl Iterator<Item = &Container> {
        self.containers.values().filter(|c| c.running)
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for container in self.containers.values() {
            if std::thread::panicking()
                && let Ok(output) = Command::new(DOCKER)
                    .args(["logs", "--tail", "40", &container.name])
                    .output()
            {
                eprintln!(
                    "--- the last log lines of {} ---\n{}{}",
                    container.name,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            let _ = docker(&["rm", "--force", "--volumes", &container.name]);
            let _ = docker(&["volume", "rm", "--force", &container.volume]);
        }
        let _ = docker(&["network", "rm", &self.network]);
    }
}
