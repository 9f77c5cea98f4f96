//! A test server on its own thread and runtime, so it keeps answering whatever the
//! test's own runtime is doing (blocked on a child process, between awaits), and stops
//! when dropped. The fakes (`mirror`, `hostile`) run on it.

use std::future::Future;
use std::net::SocketAddr;

pub struct Background {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Binds 127.0.0.1:0 and runs `serve(listener, stopped)` until it returns; `stopped`
    /// resolves when the handle is dropped.
    pub fn start<F, Fut>(serve: F) -> Background
    where
        F: FnOnce(tokio::net::TcpListener, tokio::sync::oneshot::Receiver<()>) -> Fut
            + Send
            + 'static,
        Fut: Future<Output = ()>,
    {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                serve(listener, stopped).await;
            });
        });
        Background {
            addr: addr_rx.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Serves `app` over plain HTTP until dropped.
    pub fn axum(app: axum::Router) -> Background {
        Background::start(|listener, stopped| async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
