// The job page's video player: our own control bar under a <video>, so
// that it can have what the browser's controls cannot: a quality menu
// (hls.js levels, automatic by default) and scrub previews (a storyboard
// sprite indexed by a WebVTT file, shown over the progress bar where the
// pointer is, as Mux's and PeerTube's players do). Sound is on: the player
// does not autoplay, so nothing starts playing aloud by itself.
//
// HLS through hls.js where the browser has Media Source Extensions, so
// playback starts at the rendition the master playlist lists first (a
// mid-ladder one, transcoding/ladder.py); Chromium's own HLS player would
// start at the lowest bandwidth whatever the order. Native HLS where there
// is no MSE (iOS Safari; it also starts with the first listed); the
// progressive MP4 everywhere else. The quality menu is hls.js's only.
//
// A video still being processed plays too, from its growing playlists
// (uploads/live.py), attached as soon as the job page hears it has a
// stream (`attach`). Its bar spans the whole video, the part encoded so far
// shaded; seeking past that part, or playing up to it, shows that the rest
// is still processing, never an error, and a seek ahead is kept and played
// from once that part is encoded. When the job ends the playlists end and
// the same player goes on as for any finished video.
window.fairlanePlayer = (function () {
  function clock(s) {
    if (!isFinite(s)) return "0:00";
    const whole = Math.floor(s), h = Math.floor(whole / 3600), m = Math.floor(whole / 60) % 60;
    const ss = String(whole % 60).padStart(2, "0");
    return h ? `${h}:${String(m).padStart(2, "0")}:${ss}` : `${m}:${ss}`;
  }

  // WebVTT cues of a storyboard: [{start, end, url, x, y, w, h}], the
  // sprite named in each resolved by `sprite` (its own signed link: the
  // VTT names it relative to itself, as it is stored beside it).
  function parseStoryboard(text, sprite) {
    const seconds = t => t.split(":").reduce((total, part) => total * 60 + parseFloat(part), 0);
    const cues = [];
    for (const block of text.replace(/\r/g, "").split(/\n\n+/)) {
      const lines = block.trim().split("\n");
      const at = lines.findIndex(line => line.includes("-->"));
      if (at < 0 || !lines[at + 1]) continue;
      const [start, end] = lines[at].split("-->").map(s => seconds(s.trim().split(" ")[0]));
      const [, xywh] = lines[at + 1].split("#xywh=");
      if (!xywh) continue;
      const [x, y, w, h] = xywh.split(",").map(Number);
      cues.push({start, end, url: sprite, x, y, w, h});
    }
    return cues;
  }

  function setUp(box) {
    const v = box.querySelector("video"), bar = box.querySelector(".controls");
    const play = bar.querySelector(".play"), seek = bar.querySelector(".seek"), time = bar.querySelector(".time");
    const mute = bar.querySelector(".mute"), quality = bar.querySelector(".quality");
    const full = bar.querySelector(".fullscreen"), preview = box.querySelector(".preview");
    const state = box.querySelector(".state");
    const source = document.getElementById("source");
    let cues = [];
    // While the video is processed: its whole length (the probe's), how much
    // of it is encoded, and a position asked for beyond that (null: none).
    const STALL_MS = 6000;
    let live = box.dataset.live === "1", total = Number(box.dataset.duration) || 0, encoded = 0, wanted = null;
    const length = () => (live ? total : v.duration || total);
    const say = text => { state.textContent = text || ""; state.hidden = !text; box.dataset.state = text ? "processing" : ""; };

    // Fit the window: as wide as the page allows, no taller than the room
    // left below the player's top, less its control bar (--room).
    const fit = () => box.style.setProperty("--room", Math.max(
      160, innerHeight - (box.getBoundingClientRect().top + scrollY) - bar.offsetHeight - 16) + "px");
    fit();
    addEventListener("resize", fit);

    // The first frame decoded and shown (bench/ttfp.py reads it), as the
    // wall clock's milliseconds.
    const shownFirst = () => { if (!box.dataset.firstFrame) box.dataset.firstFrame = String(Date.now()); };
    if (v.requestVideoFrameCallback) v.requestVideoFrameCallback(shownFirst); else v.addEventListener("loadeddata", shownFirst);

    function attach(url) {
      if (window.Hls && Hls.isSupported()) {
        // A growing playlist is played from its start, not from its end as a broadcast would be.
        const hls = new Hls(live ? {startPosition: 0} : {});
        hls.loadSource(url);
        hls.attachMedia(v);
        box.hls = hls;  // for the tests and the curious
        hls.on(Hls.Events.MANIFEST_PARSED, (_, data) => {
          const levels = data.levels.map((level, i) => ({i, p: Math.min(level.width, level.height)}))
            .sort((a, b) => b.p - a.p);
          quality.append(...levels.map(({i, p}) => new Option(`${p}p`, String(i))));
          quality.hidden = levels.length < 2;
        });
        // Auto names the rendition it is playing; a choice switches at once.
        hls.on(Hls.Events.LEVEL_SWITCHED, (_, data) => {
          const level = hls.levels[data.level];
          quality.options[0].textContent = hls.autoLevelEnabled && level ? `Auto (${Math.min(level.width, level.height)}p)` : "Auto";
          box.dataset.level = String(data.level);
        });
        // Each reload of a growing playlist: how far it goes; its end once the job is done.
        hls.on(Hls.Events.LEVEL_UPDATED, (_, data) => grown(data.details.totalduration, data.details.live));
        quality.addEventListener("change", () => { hls.currentLevel = Number(quality.value); });
        // A loader that stopped: playing, nothing buffered ahead, the position
        // encoded, and the clock not moving for STALL_MS. Seen once in a test
        // run when a growing playlist ended under a player that had seeked
        // (buffered only [0, 1] at 24 s of 30): start loading again there.
        let lastAt = -1, stillSince = 0;
        setInterval(() => {
          const waiting = !v.paused && !v.ended && v.readyState < 3 && wanted === null && !(live && v.currentTime > encoded - 1);
          if (!waiting || v.currentTime !== lastAt) {
            lastAt = v.currentTime;
            stillSince = Date.now();
          } else if (Date.now() - stillSince > STALL_MS) {
            hls.startLoad(v.currentTime);
            stillSince = Date.now();
          }
        }, 1000);
      } else if (v.canPlayType("application/vnd.apple.mpegurl")) {
        v.src = url;
      }
      box.dataset.attached = "1";
      source.textContent = live ? "Playing the HLS ladder while the rest of the video is processed." : "Playing the HLS ladder.";
      say("");
    }

    // The encoded part grew to `seconds` (still growing while `stillLive`).
    function grown(seconds, stillLive) {
      encoded = Math.max(encoded, seconds || 0);
      if (!stillLive && live) {
        live = false;
        source.textContent = "Playing the HLS ladder.";
      }
      reach();
      moved();
    }

    // Go to the position asked for once it is encoded and the media element
    // can seek there: hls.js grows the element's duration after the
    // playlist (asynchronously), and a seek past that duration would be cut
    // short to it, so it waits for the durationchange that follows too.
    function reach() {
      if (wanted === null || (live && wanted > encoded - 1)) return;
      const at = live ? Math.min(wanted, encoded) : wanted, seekable = v.seekable;
      if (!seekable.length || seekable.end(seekable.length - 1) < at - 0.05) return;
      v.currentTime = at;
      wanted = null;
      say("");
    }

    function waitFor(at) {
      wanted = at;
      say(`Still processing: ${clock(at)} is not encoded yet (${clock(encoded)} of ${clock(total)} so far). ` +
          "It plays from there as soon as it is.");
      moved();
    }

    if (v.dataset.hls && window.Hls && Hls.isSupported()) {
      attach(v.dataset.hls);
    } else if (v.dataset.hls && v.canPlayType("application/vnd.apple.mpegurl")) {
      attach(v.dataset.hls);
    } else if (v.dataset.mp4) {
      v.src = v.dataset.mp4;
      source.textContent = "Playing the MP4.";
    } else if (live) {
      say("Processing: the video plays here as soon as its first seconds are ready.");
    }

    const toggle = () => (v.paused || v.ended ? v.play() : v.pause());
    play.addEventListener("click", toggle);
    v.addEventListener("click", toggle);
    const shown = () => {
      play.classList.toggle("playing", !v.paused);
      play.setAttribute("aria-label", v.paused ? "Play" : "Pause");
    };
    v.addEventListener("play", shown);
    v.addEventListener("pause", shown);
    function moved() {
      const whole = length(), at = wanted ?? v.currentTime;
      if (!seek.matches(":active")) seek.value = whole ? String(1000 * at / whole) : "0";
      seek.style.setProperty("--ready", live && whole ? `${Math.min(100, 100 * encoded / whole)}%` : "100%");
      seek.classList.toggle("growing", live);
      time.textContent = `${clock(at)} / ${clock(whole)}`;
    }
    v.addEventListener("timeupdate", moved);
    v.addEventListener("durationchange", () => {
      if (live && isFinite(v.duration)) grown(v.duration, true); else { reach(); moved(); }
    });
    seek.addEventListener("input", () => {
      const whole = length(), at = whole * seek.value / 1000;
      if (!whole) return;
      if (live && at > encoded - 0.5) return waitFor(at);
      wanted = null;
      say("");
      v.currentTime = at;
    });
    // Played up to where the encoding is (a stall while the video grows is
    // that, or the sound's edge, which the picture's may be a little ahead of).
    v.addEventListener("waiting", () => {
      if (live && wanted === null) say("Still processing: more of the video is on its way.");
    });
    v.addEventListener("playing", () => { if (wanted === null) say(""); });
    mute.addEventListener("click", () => { v.muted = !v.muted; });
    v.addEventListener("volumechange", () => {
      mute.classList.toggle("muted", v.muted);
      mute.setAttribute("aria-label", v.muted ? "Unmute" : "Mute");
    });
    full.addEventListener("click", () => (document.fullscreenElement ? document.exitFullscreen() : box.requestFullscreen()));

    // Scrub previews: the frame of the time under the pointer, over the bar.
    if (box.dataset.storyboard) {
      fetch(box.dataset.storyboard).then(r => (r.ok ? r.text() : "")).then(text => {
        cues = parseStoryboard(text, box.dataset.storyboardSprite);
        box.dataset.previews = String(cues.length);
      }).catch(() => {});
    }
    function hover(event) {
      const whole = length();
      const r = seek.getBoundingClientRect();
      const share = Math.min(1, Math.max(0, (event.clientX - r.left) / r.width));
      const at = share * whole;
      const cue = cues.find(c => at >= c.start && at < c.end) || (at >= whole && cues[cues.length - 1]);
      if (!whole || !cue) { preview.hidden = true; return; }
      const frame = preview.querySelector(".frame");
      frame.style.width = `${cue.w}px`;
      frame.style.height = `${cue.h}px`;
      frame.style.backgroundImage = `url("${cue.url}")`;
      frame.style.backgroundPosition = `-${cue.x}px -${cue.y}px`;
      preview.querySelector(".at").textContent = clock(at);
      const left = r.left - box.getBoundingClientRect().left + share * r.width - cue.w / 2;
      preview.style.left = `${Math.min(box.clientWidth - cue.w, Math.max(0, left))}px`;
      preview.hidden = false;
      preview.dataset.cue = `${cue.x},${cue.y}`;
    }
    seek.addEventListener("pointermove", hover);
    seek.addEventListener("pointerleave", () => { preview.hidden = true; });
    shown();
    moved();

    // What the job page tells the player of the job's `stream` (the API's):
    // attach it the first time, follow how much is encoded after.
    function stream(info) {
      if (!info) return;
      total = info.duration_s || total;
      if (!box.dataset.attached) {
        live = info.live;
        attach(info.url);
      }
      if (live) grown(info.encoded_s, info.live);
    }
    return {stream};
  }

  return {setUp, parseStoryboard, clock};
})();
