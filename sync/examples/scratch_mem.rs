use kube::client::ConfigExt;
fn rss() -> u64 { std::fs::read_to_string("/proc/self/statm").unwrap().split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()*4096 }
#[tokio::main]
async fn main() {
    let n = 2000;
    let cfg = kube::Config::new("http://127.0.0.1:1/clusters/x".parse().unwrap());
    let b = rss();
    let mut v = Vec::new();
    for _ in 0..n { v.push(cfg.rustls_https_connector().unwrap()); }
    let c = rss();
    println!("https connector: {:.1} KiB", (c-b) as f64/n as f64/1024.0);
    let mut w = Vec::new();
    for _ in 0..n { w.push(kube::Client::try_from(cfg.clone()).unwrap()); }
    let d = rss();
    println!("kube client: {:.1} KiB", (d-c) as f64/n as f64/1024.0);
    let mut x = Vec::new();
    for _ in 0..n { x.push(cfg.rustls_client_config().unwrap()); }
    let e = rss();
    println!("rustls client config: {:.1} KiB", (e-d) as f64/n as f64/1024.0);
    drop((v,w,x));
}
