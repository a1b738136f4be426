"""The AAC that carries a file's sound out (an audio file's M4A, a video's
renditions and its MP4): never more than the source has. Not more bits
per second than the source's own (measured from its packets by the probe:
re-encoding cannot add what a 64 kbit/s MP3 lost, only bytes), not more
channels (a mono recording stays mono; more than two are mixed down to
stereo), and at most the ceilings below, which were the fixed settings
for every file before. The sample rate is 48 kHz (the web's and HLS's
usual), but a source below 32 kHz (a phone's 8 or 16 kHz voice) keeps
its own: at 48 kHz AAC does not go under about 16 kbit/s, more than such
a source has."""
from __future__ import annotations

from dataclasses import dataclass

from transcoding.probe import Probe

# Stereo ceilings: an audio file is listened to for itself, a video's sound
# is one part of each rendition (AAC-LC is transparent for most music from
# about 128 kbit/s stereo).
AUDIO_STEREO_MAX_KBPS = 160
VIDEO_STEREO_MAX_KBPS = 128
# Mono needs about half of stereo's bits for the same quality.
MONO_MAX_KBPS = 96
SAMPLE_RATE = 48000
KEEP_RATE_BELOW = 32000
# Below this AAC (ffmpeg's encoder) does not go at any rate; sources under
# it (a very low-rate voice codec) get it.
MIN_KBPS = 8


@dataclass(frozen=True)
class Aac:
    kbps: int
    channels: int
    sample_rate: int

    def args(self) -> list[str]:
        """ffmpeg's output options (the sample rate is set where the sound is
        resampled, `aresample=<rate>`, before any split)."""
        return ["-c:a", "aac", "-b:a", f"{self.kbps}k", "-ac", str(self.channels)]


def for_source(probe: Probe, *, stereo_max_kbps: int) -> Aac:
    """The AAC for `probe`'s audio stream; the ceilings when the probe could
    not measure its bitrate."""
    stream = probe.audio_stream
    channels = 1 if stream is not None and stream.channels == 1 else 2
    ceiling = MONO_MAX_KBPS if channels == 1 else stereo_max_kbps
    kbps = ceiling if not probe.audio_kbps else max(MIN_KBPS, min(ceiling, int(probe.audio_kbps)))
    source_rate = stream.sample_rate if stream is not None and stream.sample_rate else SAMPLE_RATE
    return Aac(kbps=kbps, channels=channels, sample_rate=source_rate if source_rate < KEEP_RATE_BELOW else SAMPLE_RATE)
