// Microphone recording for the page: MediaRecorder captures the microphone in whatever container
// the browser records (WebM/Opus in Chromium, which the server does not read), the browser decodes
// the recording and resamples it to 16 kHz mono (the rate the speech encoder works at), and it is
// sent as a 16-bit PCM WAV file, a format the server accepts.

const RATE = 16000;

// 16-bit PCM mono WAV bytes of `samples` (floats in [-1, 1]) at `rate` Hz.
export function encodeWav(samples, rate = RATE) {
  const bytes = new ArrayBuffer(44 + samples.length * 2);
  const v = new DataView(bytes);
  const text = (at, s) => { for (let i = 0; i < s.length; i++) v.setUint8(at + i, s.charCodeAt(i)); };
  text(0, 'RIFF');
  v.setUint32(4, 36 + samples.length * 2, true);
  text(8, 'WAVE');
  text(12, 'fmt ');
  v.setUint32(16, 16, true);
  v.setUint16(20, 1, true);  // PCM
  v.setUint16(22, 1, true);  // mono
  v.setUint32(24, rate, true);
  v.setUint32(28, rate * 2, true);
  v.setUint16(32, 2, true);
  v.setUint16(34, 16, true);
  text(36, 'data');
  v.setUint32(40, samples.length * 2, true);
  for (let i = 0; i < samples.length; i++) {
    const x = Math.max(-1, Math.min(1, samples[i]));
    v.setInt16(44 + i * 2, x < 0 ? Math.round(x * 0x8000) : Math.round(x * 0x7fff), true);
  }
  return new Uint8Array(bytes);
}

// Decodes any audio the browser can read into 16 kHz mono samples.
export async function decodeToMono16k(arrayBuffer) {
  const ctx = new OfflineAudioContext(1, 1, RATE);
  const buffer = await ctx.decodeAudioData(arrayBuffer);
  const mono = new Float32Array(buffer.length);
  for (let c = 0; c < buffer.numberOfChannels; c++) {
    const data = buffer.getChannelData(c);
    for (let i = 0; i < data.length; i++) mono[i] += data[i] / buffer.numberOfChannels;
  }
  return mono;
}

// One recording from the microphone. start() asks for the microphone; stop() resolves to the WAV
// bytes and the clip's length in seconds.
export class Recorder {
  async start() {
    if (!navigator.mediaDevices?.getUserMedia || typeof MediaRecorder === 'undefined') {
      throw new Error('This browser cannot record audio here (recording needs https or localhost)');
    }
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    this.chunks = [];
    this.recorder = new MediaRecorder(this.stream);
    this.recorder.addEventListener('dataavailable', (e) => { if (e.data.size) this.chunks.push(e.data); });
    this.recorder.start();
  }

  stop() {
    return new Promise((resolve, reject) => {
      this.recorder.addEventListener('stop', async () => {
        this.stream.getTracks().forEach((t) => t.stop());
        try {
          const blob = new Blob(this.chunks, { type: this.recorder.mimeType });
          const samples = await decodeToMono16k(await blob.arrayBuffer());
          if (samples.length < RATE / 10) throw new Error('The recording is too short');
          resolve({ wav: encodeWav(samples), seconds: samples.length / RATE });
        } catch (e) {
          reject(e instanceof Error ? e : new Error(`The recording could not be decoded (${e})`));
        }
      }, { once: true });
      this.recorder.stop();
    });
  }

  cancel() {
    if (this.recorder && this.recorder.state !== 'inactive') this.recorder.stop();
    this.stream?.getTracks().forEach((t) => t.stop());
  }
}
