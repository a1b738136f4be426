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
    const source = document.getElementById("source");
    let cues = [];

    // Fit the window: as wide as the page allows, no taller than the room
    // left below the player's top, less its control bar (--room).
    const fit = () => box.style.setProperty("--room", Math.max(
      160, innerHeight - (box.getBoundingClientRect().top + scrollY) - bar.offsetHeight - 16) + "px");
    fit();
    addEventListener("resize", fit);

    if (v.dataset.hls && window.Hls && Hls.isSupported()) {
      const hls = new Hls();
      hls.loadSource(v.dataset.hls);
      hls.attachMedia(v);
      box.hls = hls;  // for the tests and the curious
      source.textContent = "Playing the HLS ladder.";
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
      quality.addEventListener("change", () => { hls.currentLevel = Number(quality.value); });
    } else if (v.dataset.hls && v.canPlayType("application/vnd.apple.mpegurl")) {
      v.src = v.dataset.hls;
      source.textContent = "Playing the HLS ladder.";
    } else {
      v.src = v.dataset.mp4;
      source.textContent = "Playing the MP4.";
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
    const moved = () => {
      if (!seek.matches(":active")) seek.value = v.duration ? String(1000 * v.currentTime / v.duration) : "0";
      time.textContent = `${clock(v.currentTime)} / ${clock(v.duration)}`;
    };
    v.addEventListener("timeupdate", moved);
    v.addEventListener("durationchange", moved);
    seek.addEventListener("input", () => { if (v.duration) v.currentTime = v.duration * seek.value / 1000; });
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
      const total = v.duration || Number(box.dataset.duration) || 0;
      const r = seek.getBoundingClientRect();
      const share = Math.min(1, Math.max(0, (event.clientX - r.left) / r.width));
      const at = share * total;
      const cue = cues.find(c => at >= c.start && at < c.end) || (at >= total && cues[cues.length - 1]);
      if (!total || !cue) { preview.hidden = true; return; }
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
  }

  return {setUp, parseStoryboard, clock};
})();
