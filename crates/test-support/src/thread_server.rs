//! A server future on a runtime thread of its own: its timing (a mock's scripted delays)
//! does not depend on how busy the test's own runtime is.

use std::future::Future;
use std::pin::Pin;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// What a server is given: its listener, and a future that resolves when it must stop.
pub type Stopped = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Stopped and joined on drop.
pub struct ThreadServer {
    pub base: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ThreadServer {
    /// Binds a loopback port and runs `serve(listener, stopped)` on a one-worker runtime.
    pub fn start<F, Fut>(serve: F) -> Self
    where
        F: FnOnce(TcpListener, Stopped) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a runtime");
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
                let _ = addr_tx.send(listener.local_addr().expect("an address"));
                serve(
                    listener,
                    Box::pin(async move {
                        let _ = stopped.await;
                    }),
                )
                .await;
            });
        });
        let addr = addr_rx.recv().expect("the server thread bound a port");
        Self { base: format!("http://{addr}"), stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for ThreadServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
